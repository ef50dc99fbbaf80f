// index.mjs: fence's Node client as an ES module, re-exporting index.js
// (CommonJS), so that `import { claim } from 'fence'` and require('fence')
// give the same classes.
import fence from './index.js';

export const { claim, Job, FenceError, HeldError, FencedError, SUPERSEDED_CHANNEL } = fence;
export default fence;
