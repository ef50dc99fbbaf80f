// test/reporter.mjs: a node:test reporter printing one line a test, "ok
// <name>" or "FAILED <name>" (the failure's details indented under it), and
// the runner's summary as "# ..." lines; test/checks/client_node.sh counts
// these lines.
import { inspect } from 'node:util';

export default async function* reporter(source) {
  for await (const event of source) {
    const d = event.data;
    if (event.type === 'test:pass') {
      yield `${d.skip ? 'FAILED' : 'ok    '} ${d.name}${d.skip ? ' (skipped)' : ''}\n`;
    } else if (event.type === 'test:fail') {
      yield `FAILED ${d.name}\n`;
      const err = d.details && d.details.error;
      const text = inspect(err && err.cause ? err.cause : err, { depth: 4 });
      yield text.split('\n').map((l) => `    ${l}`).join('\n') + '\n';
    } else if (event.type === 'test:diagnostic') {
      yield `# ${d.message}\n`;
    } else if (event.type === 'test:stderr' || event.type === 'test:stdout') {
      yield `    | ${d.message.replace(/\n$/, '').split('\n').join('\n    | ')}\n`;
    }
  }
}
