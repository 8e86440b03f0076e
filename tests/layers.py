#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""layers.py - src/ is a stack of folders, each using only the folders below it.

Usage: layers.py SRCDIR OBJDIR

Two kinds of use are read:
  - includes: every `#include "x.h"` of every .c and .h under SRCDIR, resolved
    the way the compiler does (the including file's folder first, then SRCDIR);
  - calls: every undefined pm__/pm_ symbol of every object under OBJDIR
    (`nm -u`), resolved to the object that defines it.

A module is a file's folder and name without its extension (hub/hub.c and
hub/hub.h are one module). It fails when
  - a module uses a module in a folder above its own (the order is LAYERS);
  - modules form a cycle (a strongly connected component of more than one
    module), whatever their folders;
  - a file under SRCDIR is over MAX_FILE_LINES lines.
Every finding is printed, one a line, with the use that makes it.
"""
import os
import re
import subprocess
import sys

# Bottom to top: a folder may use its own and the folders before it.
LAYERS = ["base", "os", "channel", "worker", "peer", "hub", "mesh",
          "supervisor", "daemon"]
MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 80
FUNC_NAME = re.compile(r'([A-Za-z_]\w*)\s*\(')
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def module_of(path, src):
    rel = os.path.relpath(path, src)
    return os.path.splitext(rel)[0]


def folder_of(module):
    return module.split("/")[0] if "/" in module else ""


def long_functions(path, text):
    """Functions of more than MAX_FUNCTION_LINES lines, from the opening brace
    in column 0 to the closing one (the tree's style: a function's braces, and
    only a function's, stand in column 0)."""
    out = []
    lines = text.split("\n")
    start = None
    for i, line in enumerate(lines):
        if line.startswith("{") and start is None:
            start = i
        elif line.startswith("}") and start is not None:
            n = i - start + 1
            # the signature: from the last line before the brace that starts
            # in column 0 with neither a space nor a comment
            j = start - 1
            while j > 0 and (lines[j][:1] in ("", " ", "\t", "/", "*")):
                j -= 1
            names = FUNC_NAME.findall(" ".join(lines[j:start]))
            if n > MAX_FUNCTION_LINES and names and not line.startswith("};"):
                out.append((path, names[0], n))
            start = None
    return out


def read_includes(src):
    edges = {}  # (from, to) -> a use that shows it
    long_files = []
    for root, _, names in os.walk(src):
        for name in sorted(names):
            if not name.endswith((".c", ".h")):
                continue
            path = os.path.join(root, name)
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
            lines = text.count("\n")
            if lines > MAX_FILE_LINES:
                long_files.append((os.path.relpath(path, src), lines, None))
            if name.endswith(".c"):
                for p, fn, n in long_functions(os.path.relpath(path, src), text):
                    long_files.append((p, n, fn))
            for inc in INCLUDE.findall(text):
                for base in (root, src):
                    target = os.path.normpath(os.path.join(base, inc))
                    if os.path.isfile(target) and target.startswith(src + os.sep):
                        a, b = module_of(path, src), module_of(target, src)
                        if a != b:
                            edges.setdefault((a, b), '#include "%s"' % inc)
                        break
    return edges, long_files


def nm(args, paths):
    """One nm for every object (-A prefixes each line with its file): an nm
    per object cost 0.1 s each, 20 s of the suite's time for 200 objects."""
    out = {path: [] for path in paths}
    if not paths:
        return out
    run = subprocess.run(["nm", "-A"] + args + paths, capture_output=True, text=True)
    for line in run.stdout.splitlines():
        # A symbol never holds ':', a path may: the last one ends the path.
        path, sep, rest = line.rpartition(":")
        if sep and path in out:
            out[path].append(rest)
    return out


def read_calls(src, obj):
    defined = {}
    undefined = {}
    modules = {}
    for root, _, names in os.walk(obj):
        if os.path.basename(root) == ".libs":
            continue
        for name in sorted(names):
            if not name.endswith(".o"):
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, obj)
            stem = os.path.splitext(rel)[0]
            # automake names a program's objects prog-file.o: not library code
            if "-" in os.path.basename(stem):
                continue
            module = stem
            if not (os.path.isfile(os.path.join(src, module + ".c"))):
                continue
            modules[path] = module
    paths = sorted(modules)
    defs = nm(["--defined-only"], paths)
    undefs = nm(["-u"], paths)
    for path in paths:
        module = modules[path]
        for line in defs[path]:
            parts = line.split()
            if len(parts) == 3 and parts[1] in "TDBRtdbr" and parts[1].isupper():
                defined[parts[2]] = module
        undefined[module] = [l.split()[-1] for l in undefs[path] if l.strip()]
    edges = {}
    for module, syms in undefined.items():
        for s in syms:
            target = defined.get(s)
            if target is not None and target != module:
                edges.setdefault((module, target), "calls %s" % s)
    return edges, len(undefined)


def cycles(nodes, edges):
    """Tarjan's strongly connected components, iteratively."""
    succ = {n: [] for n in nodes}
    for (a, b) in edges:
        succ.setdefault(a, []).append(b)
        succ.setdefault(b, [])
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    for start in sorted(succ):
        if start in index:
            continue
        work = [(start, iter(sorted(succ[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(succ[nxt]))))
                    advanced = True
                    break
                if nxt in on:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    n = stack.pop()
                    on.discard(n)
                    comp.append(n)
                    if n == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def through_headers(src, edges):
    """The edges that count for cycles. A header with no .c of its own (a
    folder's shared declarations, such as hub/hub_int.h) is no module of its
    own: what includes it includes what it includes, as the compiler sees it.
    So hub.c including hub_int.h, which includes hub.h, is hub using itself,
    not a cycle; a real cycle through such a header is still found."""
    header_only = {m for pair in edges for m in pair
                   if not os.path.isfile(os.path.join(src, m + ".c"))}
    out = {}
    for (a, b), use in edges.items():
        if a in header_only:
            continue
        todo, seen = [(b, use)], set()
        while todo:
            m, how = todo.pop()
            if m in seen:
                continue
            seen.add(m)
            if m in header_only:
                for (x, y), u in edges.items():
                    if x == m:
                        todo.append((y, "%s, which has %s" % (how, u)))
            elif m != a:
                out.setdefault((a, m), how)
    return out


def main():
    if len(sys.argv) != 3:
        sys.stderr.write("usage: layers.py SRCDIR OBJDIR\n")
        return 2
    src = os.path.abspath(sys.argv[1])
    obj = os.path.abspath(sys.argv[2])
    inc_edges, long_files = read_includes(src)
    call_edges, objects = read_calls(src, obj)
    if objects == 0:
        print("FAIL: no object of src/ under %s (build first)" % obj)
        return 1
    edges = dict(call_edges)
    edges.update(inc_edges)
    rank = {name: i for i, name in enumerate(LAYERS)}
    failures = 0
    for (a, b), use in sorted(edges.items()):
        fa, fb = folder_of(a), folder_of(b)
        if fa not in rank or fb not in rank:
            print("FAIL: %s or %s is in no known layer folder (%s)" % (a, b, " ".join(LAYERS)))
            failures += 1
        elif rank[fb] > rank[fa]:
            print("FAIL: up: src/%s uses src/%s (%s)" % (a, b, use))
            failures += 1
    nodes = {a for a, _ in edges} | {b for _, b in edges}
    cyc_edges = through_headers(src, edges)
    for comp in cycles(nodes, cyc_edges):
        print("FAIL: cycle: %s" % " ".join(comp))
        inside = set(comp)
        for (a, b), use in sorted(cyc_edges.items()):
            if a in inside and b in inside:
                print("      %s -> %s (%s)" % (a, b, use))
        failures += 1
    for path, lines, fn in long_files:
        if fn is None:
            print("FAIL: src/%s has %d lines (at most %d)" % (path, lines, MAX_FILE_LINES))
        else:
            print("FAIL: src/%s: %s() has %d lines (at most %d)"
                  % (path, fn, lines, MAX_FUNCTION_LINES))
        failures += 1
    if failures:
        print("layers: %d finding(s)" % failures)
        return 1
    print("layers: %d modules in %d folders, %d objects: every use points down, no cycle"
          % (len(nodes), len(LAYERS), objects))
    return 0


if __name__ == "__main__":
    sys.exit(main())
