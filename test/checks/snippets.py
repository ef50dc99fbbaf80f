#!/usr/bin/python3
"""test/checks/snippets.py: run the SQL, Python and JavaScript snippets of a
Markdown file, verbatim and in order, and say which ones fail.  Called by
test/checks/snippets.sh, once per file, against a fresh database "app" with
nothing in it.

The convention (also at the top of test/checks/snippets.sh):

- Every fenced block with the info string "sql" is a snippet.  It runs
  verbatim in its own psql session (psql -X, VERBOSITY verbose,
  ON_ERROR_STOP 1) as the superuser, in file order.  psql variables
  (\\gset, \\set) carry over to the next snippets of the file, as in one
  psql; session state (SET, temp tables, transactions) does not.  It passes
  if psql exits 0 and printed no error.
- Every block with the info string "python" runs verbatim as a program of
  its own: /usr/bin/python3 (Debian's, with psycopg 3; --python), with the
  tree's clients/python first on PYTHONPATH (so `import fence` is the
  tree's client) and the snippet's database in the environment: PGHOST,
  PGPORT, PGDATABASE=app and PGUSER (the superuser, or the role of an "as"
  marker), so that `psycopg.connect("")` and `psycopg.connect("dbname=app
  user=worker")` both reach it.  It passes if it exits 0 within the
  timeout; its output is shown when it fails.  A worker loop would wait
  forever: write the example so that it processes its job and returns.
- Every block with the info string "js" (or "javascript") runs the same
  way with node (--node), the same PG* variables, when the tree has a Node
  client (clients/node/package.json): once per file, before the first such
  block, clients/node is copied (without node_modules) into a work
  directory and `npm ci` (`npm install` when it has no package-lock.json)
  installs its dependencies there; the block's `require('NAME')` (NAME the
  package.json's name, "fence") finds that copy, and `require('pg')` the
  pg it installed (NODE_PATH).  Without clients/node each js block is
  listed "skip ... (no clients/node in this tree)"; without node or npm on
  the machine, "skip ... (no node/npm on this machine)".  A failed npm
  fails every js block of the file.  With FENCE_NPM_CACHE (an npm cache
  that holds the lock's packages: test/matrix fills one on the host), npm
  runs offline from a copy of it.
- Shell blocks (sh, bash, shell, console) are never run, and each must carry
  a skip marker: an unmarked shell block fails.  Blocks with no info string
  (output, signatures) and other languages are ignored.
- A marker is an HTML comment on the nearest non-blank line before the
  opening fence; directives are separated by ";":
    <!-- snippet: error 5F001 -->      exactly these SQLSTATEs, in order (the
                                       block runs with ON_ERROR_STOP 0)
    <!-- snippet: skip (reason) -->    not run, listed with the reason
    <!-- snippet: as ROLE -->          SET SESSION AUTHORIZATION ROLE first
                                       (python, js: PGUSER=ROLE; the role
                                       must be able to log in)
  "error" is for sql blocks only: a python or js block that should fail
  is not an example.
- A hidden setup block runs at its place, like a snippet that must succeed:
    <!-- snippet: setup
    CREATE TABLE orders (...);
    -->

Output: one line per block ("ok     FILE:LINE", "FAILED FILE:LINE: why",
"skip   FILE:LINE (reason)"), the output of a failed block indented below
it, and last a line "counts run=N errors=E skipped=S failed=F".  The exit
status is 1 if any block failed.

Usage: snippets.py [--list] [--verbose] --label NAME --psql PATH --host DIR --port N
                   [--user postgres] [--dbname app] [--tree DIR]
                   [--python /usr/bin/python3] [--node node] [--npm npm] FILE
(--tree: the source tree whose clients/ the blocks use; else the tree this
script is in.)
"""

import argparse
import os
import json
import re
import shutil
import subprocess
import sys
import tempfile

RUN_LANGS = {"sql": "sql", "python": "python", "js": "js", "javascript": "js"}
SHELL_LANGS = {"sh", "bash", "shell", "console", "shell-session", "zsh"}
MARKER = re.compile(r"^\s*<!--\s*snippet:\s*(.*?)\s*-->\s*$")
SETUP_OPEN = re.compile(r"^\s*<!--\s*snippet:\s*setup\s*$")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([^`\s]*)")
SQLSTATE = re.compile(r"\b(?:ERROR|FATAL|PANIC):\s+([0-9A-Z]{5}):")
PSQL_LINE = re.compile(r"^psql:[^:]*:(\d+):")
VAR_LINE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*) = '(.*)'$")
VARS_MARK = "@@snippet-vars@@"

# psql's own variables: never carried from one snippet to the next.
PSQL_SPECIAL = {
    "AUTOCOMMIT", "COMP_KEYWORD_CASE", "DBNAME", "ECHO", "ECHO_HIDDEN",
    "ENCODING", "ERROR", "FETCH_COUNT", "HIDE_TABLEAM",
    "HIDE_TOAST_COMPRESSION", "HISTCONTROL", "HISTFILE", "HISTSIZE", "HOST",
    "IGNOREEOF", "LASTOID", "LAST_ERROR_MESSAGE", "LAST_ERROR_SQLSTATE",
    "ON_ERROR_ROLLBACK", "ON_ERROR_STOP", "PORT", "PROMPT1", "PROMPT2",
    "PROMPT3", "QUIET", "ROW_COUNT", "SERVER_VERSION_NAME",
    "SERVER_VERSION_NUM", "SHOW_ALL_RESULTS", "SHOW_CONTEXT", "SINGLELINE",
    "SINGLESTEP", "SQLSTATE", "USER", "VERBOSITY", "VERSION", "VERSION_NAME",
    "VERSION_NUM",
}


class Block:
    def __init__(self, line, lang, text, kind):
        self.line = line        # 1-based line of the opening fence (or marker)
        self.lang = lang
        self.text = text        # the content, indentation removed
        self.kind = kind        # "sql", "python", "js", "shell", "setup"
        self.errors = []        # expected SQLSTATEs
        self.skip = None        # reason
        self.role = None
        self.problem = None     # a malformed marker


def parse_marker(block, body):
    parts, depth, cur = [], 0, ""
    for ch in body:             # split on ";" outside parentheses
        depth += (ch == "(") - (ch == ")")
        if ch == ";" and depth <= 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    for part in [p.strip() for p in parts if p.strip()]:
        m = re.match(r"^skip\s*\((.+)\)$", part)
        if m:
            block.skip = m.group(1).strip()
            continue
        m = re.match(r"^error((?:\s+[0-9A-Z]{5})+)$", part)
        if m:
            block.errors = m.group(1).split()
            continue
        m = re.match(r'^as\s+("?[A-Za-z_][A-Za-z0-9_$]*"?)$', part)
        if m:
            block.role = m.group(1)
            continue
        block.problem = "unknown snippet directive %r" % part


def extract(path):
    """Every sql block, shell block and hidden setup block, in file order,
    plus problems (markers that belong to no block)."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    blocks, problems = [], []
    pending = None          # (line, directives) of a marker awaiting its block
    i = 0
    while i < len(lines):
        line = lines[i]
        if SETUP_OPEN.match(line):
            if pending:
                problems.append((pending[0], "snippet marker not followed by a block"))
                pending = None
            j = i + 1
            while j < len(lines) and lines[j].strip() != "-->":
                j += 1
            if j == len(lines):
                problems.append((i + 1, "setup marker without a closing -->"))
                break
            blocks.append(Block(i + 1, "sql", "\n".join(lines[i + 1:j]) + "\n",
                                "setup"))
            i = j + 1
            continue
        m = FENCE.match(line)
        if m:
            indent, fence, lang = len(m.group(1)), m.group(2), m.group(3).lower()
            j = i + 1
            close = re.compile(r"^\s*" + re.escape(fence[0]) + "{" +
                               str(len(fence)) + r",}\s*$")
            while j < len(lines) and not close.match(lines[j]):
                j += 1
            body = []
            for raw in lines[i + 1:j]:
                k = 0
                while k < indent and k < len(raw) and raw[k] == " ":
                    k += 1
                body.append(raw[k:])
            kind = (RUN_LANGS.get(lang) or
                    ("shell" if lang in SHELL_LANGS else None))
            if kind:
                b = Block(i + 1, lang, "\n".join(body) + "\n", kind)
                if pending:
                    parse_marker(b, pending[1])
                blocks.append(b)
            elif pending:
                problems.append((pending[0], "snippet marker before a ```%s "
                                 "block, which is not run" % (lang or "")))
            pending = None
            i = j + 1
            continue
        mm = MARKER.match(line)
        if mm:
            if pending:
                problems.append((pending[0], "snippet marker not followed by a block"))
            pending = (i + 1, mm.group(1))
        elif line.strip() and pending:
            problems.append((pending[0], "snippet marker not followed by a block"))
            pending = None
        i += 1
    return blocks, problems


def psql_quote(value):
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


def run_block(args, block, variables, workdir):
    """Run one block; return (ok, why, output, new variables)."""
    prelude = ["\\set VERBOSITY verbose",
               "\\set ON_ERROR_STOP %d" % (0 if block.errors else 1)]
    for name, value in sorted(variables.items()):
        prelude.append("\\set %s %s" % (name, psql_quote(value)))
    if block.role:
        prelude.append("SET SESSION AUTHORIZATION %s;" % block.role)
    postlude = ["\\echo " + VARS_MARK, "\\set"]
    script = os.path.join(workdir, "block.sql")
    text = "\n".join(prelude) + "\n" + block.text
    if not text.endswith("\n"):
        text += "\n"
    text += "\n".join(postlude) + "\n"
    with open(script, "w", encoding="utf-8") as f:
        f.write(text)
    offset = len(prelude)       # script line = offset + line within block
    cmd = [args.psql, "-X", "-q", "-P", "pager=off", "-h", args.host,
           "-p", str(args.port), "-U", args.user, "-d", args.dbname,
           "-f", script]
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=args.timeout, cwd=workdir,
                           env=dict(os.environ, PGAPPNAME="snippets",
                                    PGOPTIONS="-c lc_messages=C"))
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") + \
            (e.stderr or b"").decode(errors="replace")
        return False, "timed out after %ds" % args.timeout, out, variables
    out = p.stdout.decode(errors="replace")
    err = p.stderr.decode(errors="replace")

    def where(errline):
        m = PSQL_LINE.match(errline)
        if not m:
            return ""
        n = int(m.group(1)) - offset
        if n < 1:
            return " (in the prelude)"
        return " at %s:%d" % (args.label, block.line + n)

    codes, others = [], []
    for errline in err.splitlines():
        m = SQLSTATE.search(errline)
        if m:
            codes.append((m.group(1), where(errline)))
        elif re.search(r": error: |\bERROR:|\bFATAL:|\bPANIC:", errline):
            others.append(errline.strip() + where(errline))
    head, sep, tail = out.partition(VARS_MARK + "\n")
    new_vars = dict(variables)
    if sep:
        new_vars = {}
        for vline in tail.splitlines():
            m = VAR_LINE.match(vline)
            if m and m.group(1) not in PSQL_SPECIAL:
                new_vars[m.group(1)] = m.group(2)
    shown = head + err
    if others:
        return False, "psql: " + others[0], shown, new_vars
    got = [c for c, _w in codes]
    if block.errors:
        if got != block.errors:
            return (False, "expected SQLSTATE %s, got %s" %
                    (" ".join(block.errors),
                     " ".join(c + w for c, w in codes) or "no error"),
                    shown, new_vars)
        return True, "error " + " ".join(got), shown, new_vars
    if codes:
        return False, "ERROR %s%s" % codes[0], shown, new_vars
    if p.returncode != 0:
        return False, "psql exited with %d" % p.returncode, shown, new_vars
    if not sep:
        return False, "the block ended psql early (\\quit?)", shown, new_vars
    return True, "", shown, new_vars


def program_env(args, block, extra=None):
    """The environment of a python or js block: the snippet's database."""
    env = dict(os.environ, PGHOST=args.host, PGPORT=str(args.port),
               PGDATABASE=args.dbname,
               PGUSER=(block.role or args.user).strip('"'),
               PGAPPNAME="snippets")
    env.pop("PGOPTIONS", None)     # lc_messages is for superusers only
    env.pop("PGPASSWORD", None)
    env.pop("PGSERVICE", None)
    env.update(extra or {})
    return env


def run_program(args, block, workdir, cmd, name, env):
    """Run a python or js block as a program; return (ok, why, output)."""
    script = os.path.join(workdir, name)
    with open(script, "w", encoding="utf-8") as f:
        f.write(block.text)
    try:
        p = subprocess.run(cmd + [script], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=args.timeout,
                           cwd=os.path.dirname(script), env=env)
    except subprocess.TimeoutExpired as e:
        return (False, "timed out after %ds (a worker loop? process one job "
                "and return)" % args.timeout,
                (e.stdout or b"").decode(errors="replace"))
    except OSError as e:
        return False, "cannot run %s: %s" % (cmd[0], e), ""
    out = p.stdout.decode(errors="replace")
    if p.returncode != 0:
        return False, "%s exited with %d" % (os.path.basename(cmd[0]),
                                             p.returncode), out
    return True, "", out


def run_python(args, block, workdir):
    path = os.path.join(args.tree, "clients", "python")
    old = os.environ.get("PYTHONPATH")
    env = program_env(args, block, {
        "PYTHONPATH": path + (os.pathsep + old if old else ""),
        "PYTHONDONTWRITEBYTECODE": "1"})
    return run_program(args, block, workdir, [args.python], "block.py", env)


class NodeClient:
    """clients/node copied into the work directory and npm-installed, once."""

    def __init__(self, args, workdir):
        self.args = args
        self.workdir = workdir
        self.state = None       # None: not tried; else ("skip"|"fail"|"ok", why)
        self.run_dir = os.path.join(workdir, "js")
        self.copy = os.path.join(workdir, "node-client")

    def prepare(self):
        if self.state is not None:
            return self.state
        src = os.path.join(self.args.tree, "clients", "node")
        if not os.path.isfile(os.path.join(src, "package.json")):
            self.state = ("skip", "no clients/node in this tree")
            return self.state
        node = shutil.which(self.args.node)
        npm = shutil.which(self.args.npm)
        if not node or not npm:
            self.state = ("skip", "no node/npm on this machine")
            return self.state
        self.node = node
        shutil.copytree(src, self.copy, symlinks=True,
                        ignore=shutil.ignore_patterns("node_modules"))
        with open(os.path.join(self.copy, "package.json"), encoding="utf-8") as f:
            name = json.load(f).get("name") or "fence"
        lock = os.path.exists(os.path.join(self.copy, "package-lock.json"))
        cmd = [npm, "ci" if lock else "install", "--no-audit", "--no-fund",
               "--loglevel=error"]
        cache = os.environ.get("FENCE_NPM_CACHE")
        if cache:
            # a cache filled elsewhere (test/matrix, for a chroot that cannot
            # reach the registry): offline, from a copy of it
            copy = os.path.join(self.workdir, "npm-cache")
            shutil.copytree(cache, copy, symlinks=True)
            cmd += ["--offline", "--cache", copy]
        try:
            p = subprocess.run(cmd, cwd=self.copy, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=300)
            out, rc = p.stdout.decode(errors="replace"), p.returncode
        except subprocess.TimeoutExpired:
            out, rc = "timed out after 300 s", -1
        if rc != 0:
            self.state = ("fail", "%s in a copy of clients/node failed:\n%s" %
                          (" ".join(cmd[1:2]), out[-2000:]))
            return self.state
        link = os.path.join(self.run_dir, "node_modules", name)
        os.makedirs(os.path.dirname(link), exist_ok=True)
        os.symlink(self.copy, link)
        self.state = ("ok", "npm %s: %s" % (cmd[1], name))
        return self.state

    def run(self, block):
        env = program_env(self.args, block, {
            "NODE_PATH": os.path.join(self.copy, "node_modules")})
        return run_program(self.args, block, self.run_dir, [self.node],
                           "block.js", env)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--verbose", action="store_true",
                    help="show the output of every block")
    ap.add_argument("--label")
    # the PostgreSQL under test (test/lib.sh exports FENCE_PG_BIN), else PATH's
    ap.add_argument("--psql", default=os.path.join(os.environ["FENCE_PG_BIN"], "psql")
                    if os.environ.get("FENCE_PG_BIN") else "psql")
    ap.add_argument("--host", default="/tmp")
    ap.add_argument("--port", type=int, default=5432)
    ap.add_argument("--user", default="postgres")
    ap.add_argument("--dbname", default="app")
    ap.add_argument("--timeout", type=int, default=60)
    ap.add_argument("--tree", default=os.path.normpath(os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..")))
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--node", default="node")
    ap.add_argument("--npm", default="npm")
    ap.add_argument("file")
    args = ap.parse_args()
    args.label = args.label or args.file

    blocks, problems = extract(args.file)
    n_run = n_err = n_skip = n_fail = 0
    for line, why in problems:
        print("FAILED %s:%d: %s" % (args.label, line, why))
        n_fail += 1
    variables = {}
    with tempfile.TemporaryDirectory(prefix="snippets.") as workdir:
        os.chmod(workdir, 0o755)
        node = NodeClient(args, workdir)
        for b in blocks:
            loc = "%s:%d" % (args.label, b.line)
            what = " (setup)" if b.kind == "setup" else ""
            if b.problem:
                print("FAILED %s: %s" % (loc, b.problem))
                n_fail += 1
                continue
            if b.skip is not None:
                print("skip   %s (%s)" % (loc, b.skip))
                n_skip += 1
                continue
            if b.kind == "shell":
                print("FAILED %s: a ```%s block needs a marker "
                      "<!-- snippet: skip (reason) -->" % (loc, b.lang))
                n_fail += 1
                continue
            if b.kind in ("python", "js") and b.errors:
                print("FAILED %s: an error marker is for ```sql blocks only" % loc)
                n_fail += 1
                continue
            if b.kind == "js" and not args.list:
                state, why = node.prepare()
                if state == "skip":
                    print("skip   %s (%s)" % (loc, why))
                    n_skip += 1
                    continue
                if state == "fail":
                    print("FAILED %s (js): %s" % (loc, why.split("\n")[0]))
                    for oline in why.split("\n")[1:][-25:]:
                        print("       | " + oline)
                    n_fail += 1
                    continue
            if b.kind in ("python", "js"):
                what = " (%s)" % b.kind
            if args.list:
                print("run    %s%s%s" % (loc, what, " error " +
                      " ".join(b.errors) if b.errors else ""))
                continue
            if b.kind == "python":
                ok, why, output = run_python(args, b, workdir)
            elif b.kind == "js":
                ok, why, output = node.run(b)
            else:
                ok, why, output, variables = run_block(args, b, variables, workdir)
            n_run += 1
            if ok:
                n_err += 1 if b.errors else 0
                print("ok     %s%s%s" % (loc, what, " (%s)" % why if why else ""))
                if args.verbose:
                    for oline in output.rstrip("\n").splitlines():
                        print("       | " + oline)
            else:
                n_fail += 1
                print("FAILED %s%s: %s" % (loc, what, why))
                for oline in output.rstrip("\n").splitlines()[-25:]:
                    print("       | " + oline)
    print("counts run=%d errors=%d skipped=%d failed=%d" %
          (n_run, n_err, n_skip, n_fail))
    return 1 if n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
