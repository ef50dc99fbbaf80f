#!/usr/bin/python3
"""test/checks/layers.py: the C files' calls run one way (issue 32).

For each .c file at the top of the tree: the functions it defines with
external linkage (PostgreSQL's layout: the return type on one line, the
name at the start of the next), and every identifier it uses outside
comments, strings and character constants.  A file uses another when it
names a function the other defines (a call or a function pointer alike).

It fails on a cycle among the files: two files that use each other, or a
longer ring (each strongly connected group of files is printed with the
uses that hold it together).  It also fails when fence.h's map, read as a
list of floors from the top down, has a file using one listed above it,
so that the map a newcomer reads is the order the calls run.

Usage: layers.py [TREE]   (default: the tree this script is in)
Exit 0 when the calls run one way, 1 otherwise.
"""

import os
import re
import sys

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
DEFINITION = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\(")


def strip(text):
    """The code of a C file without comments, strings and char constants
    (each replaced by a space; newlines kept so line numbers still hold)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(" ")
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def definitions(code):
    """Functions with external linkage defined in code."""
    names = set()
    lines = code.split("\n")
    for k, line in enumerate(lines):
        m = DEFINITION.match(line)
        if not m or k == 0:
            continue
        prev = lines[k - 1].strip()
        if not prev or prev.endswith((";", "}", ",", ")")) or prev.startswith("#"):
            continue
        if re.search(r"\bstatic\b", prev):
            continue
        # a definition, not a prototype: the next "{" or ";" after the
        # parameter list decides
        rest = "\n".join(lines[k:k + 40])
        depth, pos = 0, 0
        for pos, ch in enumerate(rest):
            if ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
                if depth == 0:
                    break
        tail = rest[pos + 1:].lstrip()
        if tail.startswith("{"):
            names.add(m.group(1))
    return names


def map_order(tree):
    """The .c files in the order fence.h's map lists them."""
    order = []
    with open(os.path.join(tree, "fence.h")) as f:
        head = f.read().split("*/", 1)[0]
    for m in re.finditer(r"^ \*\t([a-z_]+\.c)\b", head, re.M):
        if m.group(1) not in order:
            order.append(m.group(1))
    return order


def sccs(nodes, edges):
    """Tarjan's strongly connected components."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def main():
    tree = sys.argv[1] if len(sys.argv) > 1 else \
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    files = sorted(f for f in os.listdir(tree) if f.endswith(".c"))
    code, defined = {}, {}
    for f in files:
        with open(os.path.join(tree, f)) as fh:
            code[f] = strip(fh.read())
        for name in definitions(code[f]):
            if name in defined:
                print("FAILED %s is defined in %s and %s" % (name, defined[name], f))
                return 1
            defined[name] = f
    if len(defined) < len(files):
        print("FAILED found only %d external functions in %d files: is the layout still PostgreSQL's?"
              % (len(defined), len(files)))
        return 1

    # uses[a][b]: the names a uses that b defines
    uses = {f: {} for f in files}
    for f in files:
        for name in set(IDENT.findall(code[f])):
            g = defined.get(name)
            if g and g != f:
                uses[f].setdefault(g, set()).add(name)
    edges = {f: set(uses[f]) for f in files}

    failed = 0
    for comp in sccs(files, edges):
        if len(comp) < 2:
            continue
        failed += 1
        print("FAILED these files call each other: %s" % ", ".join(comp))
        for a in comp:
            for b in comp:
                if b in uses[a]:
                    print("         %s -> %s: %s" % (a, b, ", ".join(sorted(uses[a][b]))))

    order = map_order(tree)
    missing = [f for f in files if f not in order]
    if missing:
        failed += 1
        print("FAILED fence.h's map does not list %s" % ", ".join(missing))
    else:
        rank = {f: k for k, f in enumerate(order)}
        for a in files:
            for b in sorted(uses[a]):
                if rank[b] < rank[a]:
                    failed += 1
                    print("FAILED %s calls up into %s, listed above it in fence.h's map: %s"
                          % (a, b, ", ".join(sorted(uses[a][b]))))
    if failed:
        return 1
    print("ok     %d C files, %d external functions: every call runs down fence.h's map (%s)"
          % (len(files), len(defined), " > ".join(order)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
