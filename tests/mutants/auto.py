#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""auto.py - systematic mutation testing (tests/mutants/README.md, "Automatic
mutants"; doc/reliability.md, "Mutation score").

Generates every one-line mutant of the rule-enforcing source files named in
tests/mutants/map.txt with a few fixed operators, applies each one in a
scratch copy of the tree (never in the source tree), rebuilds, runs the test
programs map.txt names for that file, and reports a score per file and every
survivor with its line.

Operators (each mutant changes exactly one line and keeps the line count):
  rel         flip a relational operator: < <=, <= <, > >=, >= >, == !=, != ==
  neg         negate a condition: an if/while condition written on one line,
              or one operand of && / ||  (X -> !(X))
  dropcond    drop one operand of && / || (replaced by 1 in &&, 0 in ||)
  dropstore   drop a statement that assigns a field (a->b = ..., a.b = ...,
              ++/--, compound assignments) or stores through a pointer (*p = ...)
  droperr     drop `return -E...;` / `return -errno;` / `x = -E...;` (-> `;`)
  ret0        replace `return -E...;` / `return -errno;` by `return 0;`
  const       replace an integer constant bound by its neighbour (N+1, N-1),
              on lines that compare, in #define NAME value and NAME = value

A mutant listed in tests/mutants/equivalent.txt (judged equivalent by hand,
with the reason) is reported as equivalent and neither built nor run.
For each mutant: write the mutated line in the scratch tree, compile only the
file's object (does not compile: reported apart, not scored), compare the
object with the unmutated one after `objcopy --strip-debug` (byte-identical:
trivially equivalent, reported apart, not scored), else build the test
programs and the helpers they start, run the programs in map.txt's order and
stop at the first that fails (killed), crashes or overruns its timeout
(killed, marked "timeout"). A program that exits 77 (skip) kills nothing.
Before any mutant, every program is run on the unmutated scratch tree: a
program that fails there twice in a row makes the run refuse to start (exit
2), since it would make every mutant look killed (one that fails once, then
passes, is flaky: it goes on; the output is in WORK/baseline-PROGRAM.log).

Usage: auto.py [options] [FILE...]   (FILE: a path of map.txt; default all)
  --srcdir DIR       source tree (default: two levels above this script)
  --work DIR         scratch directory (default ./mutants-auto)
  --jobs N           parallel scratch trees (default $MUTANTS_JOBS or 1)
  --sample N         a random sample of N mutants over the selected files
  --seed S           the sample's seed (default 1)
  --min-score PCT    exit 1 if the overall score is below PCT; "ci" reads
                     tests/mutants/ci-threshold.txt
  --report FILE      the text report (default WORK/report.txt)
  --timeout S        per-program timeout (default: 3 x its baseline + the
                     slack; $MUTANT_TIMEOUT also sets it)
  --slack S          the slack of the default timeout (default 60 s). A
                     timeout counts as killed, so a short one can only
                     raise a score: CI's sample uses 10 s (its two hanging
                     mutants took 3 of its 4 minutes with 60)
  --tree DIR         use DIR (DIR/src, DIR/build: the scratch tree of run.sh,
                     mutants-work) as the first job tree and DIR/tree1 ... as
                     the others (run.sh --trees builds them), so that CI
                     builds each tree once; a missing one is built here
  --programs N       run only the first N programs map.txt names for a file
                     (its targeted, quick ones: CI), not all of them
  --no-confirm       count a program's first failure as a kill (by default
                     the program is run again: a mutant is killed when it
                     fails twice, "flaky" when the second run passes)
  --lines [FILE:]A[-[B]]  only the mutants of line A, lines A to B, or A onward (A-) of
                     FILE (of every selected file without FILE:); repeatable:
                     the ranges add up (a mutant in any of them is run).
                     Resumes an interrupted file, or judges a changed region
  --fresh            configure and build the scratch trees anew
  --list             print the mutants, build nothing
  --select           coverage-guided: first build a coverage tree (WORK/cov,
                     --coverage -O0), run each test case of the map's programs
                     alone in it and record which lines of the files it runs
                     (gcov; WORK/coverage.json, kept while the sources are the
                     same); then judge a mutant by the cases that run its line
                     only, fastest first (a case, CK_RUN_CASE, takes seconds
                     where its program takes minutes); a #define or
                     enumerator line, by the cases that run the file's code
                     lines using its name. A mutant none of those cases
                     kills, or on a line no case runs, is then judged by the
                     whole programs, as without --select (gcov counts only
                     processes that exit normally: not a test's child that
                     ends in _exit, nor a killed worker), so the verdict is
                     the whole programs'; any other line gcov does not
                     count as code (a declaration) goes to them at once
Exit: 0 done (score at or above --min-score), 1 below it, 2 usage/setup error
(including a baseline that fails).
"""
import argparse
import concurrent.futures
import datetime
import hashlib
import json
import os
import platform
import queue
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# A program needs a helper rebuilt with the mutant when its source names it
# (or includes supervise.h, which starts pm-test-worker).
HELPER_MARKS = {
    "tests/pm-test-worker": ("supervise.h", "PM_TEST_WORKER", "pm-test-worker"),
    "tests/pm-raw-worker": ("PM_RAW_WORKER", "pm-raw-worker"),
    "tests/pm-notify-send": ("PM_NOTIFY_SEND", "pm-notify-send"),
    "tests/pm-proxy": ("PM_PROXY", "pm-proxy"),
    "tests/pm-bad-peer": ("PM_BAD_PEER", "pm-bad-peer"),
    "src/daemon/procmesh": ("PM_DAEMON_BIN", "daemon/procmesh"),
}


def helpers_of(srcdir, prog):
    """The helpers tests/PROG starts, as make targets, then PROG itself."""
    with open(os.path.join(srcdir, "tests", prog + ".c")) as f:
        text = f.read()
    return [h for h, marks in HELPER_MARKS.items() if any(m in text for m in marks)] \
        + ["tests/" + prog]


def die(msg):
    print("auto.py: " + msg, file=sys.stderr)
    sys.exit(2)


# --- the map --------------------------------------------------------------

def read_map(path):
    """map.txt: `FILE PROGRAM...` per line, # comments. Ordered dict."""
    m = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].split()
            if not line:
                continue
            if len(line) < 2:
                die("%s:%d: a file needs at least one test program" % (path, n))
            m[line[0]] = line[1:]
    return m


# --- the mutants ------------------------------------------------------------

TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<lc>//.*)
  | (?P<bc>/\*)
  | (?P<str>"(?:\\.|[^"\\])*")
  | (?P<chr>'(?:\\.|[^'\\])*')
  | (?P<num>(?:0[xX][0-9a-fA-F]+|[0-9]+)[uUlL]*(?![.\w]))
  | (?P<fnum>[0-9][\w.]*)
  | (?P<id>[A-Za-z_]\w*)
  | (?P<op><<=|>>=|->|\+\+|--|<<|>>|<=|>=|==|!=|&&|\|\||[-+*/%&|^]=|[-+*/%&|^!~<>=?:;,.()\[\]{}])
  | (?P<other>.)
""", re.X)

REL = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "=="}
ASSIGN = {"=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>="}
STOPS = {"&&", "||", ",", "?", ":", ";", "{", "}", "return", "if", "while"} | ASSIGN


class Tok:
    __slots__ = ("kind", "text", "start", "end", "depth")

    def __init__(self, kind, text, start, end):
        self.kind, self.text, self.start, self.end = kind, text, start, end
        self.depth = 0


def tokenize(line, in_comment):
    """Code tokens of one line; returns (tokens, in_comment after the line)."""
    toks = []
    pos = 0
    while pos < len(line):
        if in_comment:
            e = line.find("*/", pos)
            if e < 0:
                return toks, True
            pos = e + 2
            in_comment = False
            continue
        m = TOKEN.match(line, pos)
        k = m.lastgroup
        if k == "bc":
            in_comment = True
        elif k == "lc":
            break
        elif k != "ws":
            toks.append(Tok(k, m.group(), m.start(), m.end()))
        pos = m.end()
    d = 0
    for t in toks:  # paren depth relative to the line's start
        if t.text in "([" and t.kind == "op":
            t.depth = d
            d += 1
        elif t.text in ")]" and t.kind == "op":
            d -= 1
            t.depth = d
        else:
            t.depth = d
    return toks, in_comment


def splice(line, a, b, text):
    return line[:a] + text + line[b:]


def operand(toks, i, step):
    """The span (first, last token index) of the operand of toks[i] (&& or
    ||) on side step (-1 left, +1 right), or None."""
    d = toks[i].depth
    j = i + step
    last = None
    while 0 <= j < len(toks):
        t = toks[j]
        if t.depth < d or (t.depth == d and t.text in STOPS):
            break
        last = j
        j += step
    if last is None:
        return None
    return (last, i - 1) if step < 0 else (i + 1, last)


def number(text, delta):
    m = re.match(r"(0[xX][0-9a-fA-F]+|[0-9]+)([uUlL]*)$", text)
    digits, suffix = m.groups()
    if digits[:2].lower() == "0x":
        v = int(digits, 16) + delta
        if delta == 0:
            return "0x%x" % v
        return None if v < 0 else ("0x%X" % v if digits[2:].isupper() else "0x%x" % v) + suffix
    if len(digits) > 1 and digits[0] == "0":
        return None  # octal: leave alone
    v = int(digits) + delta
    return None if v < 0 else str(v) + suffix


def single_comparison(toks):
    """One relational operator at the top level and no && / ||: its
    negation is the rel mutant already (a == b -> a != b, a < b -> a >= b is
    near a <= b), so neg adds nothing but time."""
    d = min(t.depth for t in toks)
    top = [t.text for t in toks if t.depth == d and t.kind == "op"]
    return sum(x in REL for x in top) == 1 and "&&" not in top and "||" not in top


def line_mutants(line, toks):
    """(operator, mutated line) for one code line."""
    out = []
    texts = [t.text for t in toks]
    stripped = line.strip()
    if not toks or "_Static_assert" in texts or "static_assert" in texts:
        return out
    if stripped.startswith("#"):
        # Only `#define NAME value`: its numbers are bounds.
        m = re.match(r"\s*#\s*define\s+\w+\s", line)
        if m:
            for t in toks:
                if t.kind == "num" and t.start >= m.end():
                    for delta in (1, -1):
                        n = number(t.text, delta)
                        if n is not None:
                            out.append(("const", splice(line, t.start, t.end, n)))
        return out
    has_rel = any(t.kind == "op" and t.text in REL for t in toks)
    for t in toks:
        if t.kind == "op" and t.text in REL:
            out.append(("rel", splice(line, t.start, t.end, REL[t.text])))
    # neg: a whole one-line if/while condition.
    if len(toks) >= 3 and texts[0] in ("if", "while") and texts[1] == "(":
        for j in range(2, len(toks)):
            if texts[j] == ")" and toks[j].depth == 0:
                a, b = toks[2].start, toks[j - 1].end
                if not single_comparison(toks[2:j]):
                    out.append(("neg", splice(line, a, b, "!(" + line[a:b] + ")")))
                break
    # neg / dropcond: each operand of && and ||.
    for i, t in enumerate(toks):
        if t.kind != "op" or t.text not in ("&&", "||"):
            continue
        for step in (-1, 1):
            span = operand(toks, i, step)
            if span is None:
                continue
            a, b = toks[span[0]].start, toks[span[1]].end
            if not single_comparison(toks[span[0]:span[1] + 1]):
                out.append(("neg", splice(line, a, b, "!(" + line[a:b] + ")")))
            out.append(("dropcond", splice(line, a, b, "1" if t.text == "&&" else "0")))
    indent = line[:len(line) - len(line.lstrip())]
    whole = texts[-1] == ";" and all(t.depth == 0 for t in toks)
    # dropstore: a->b = ...; a.b = ...; a->b++; *p = ...;
    if whole and toks[0].kind == "id" and texts[0] not in ("return", "goto", "case", "break",
                                                            "continue", "else", "do"):
        j = 1
        field = False
        while j < len(toks) and (texts[j] in ("->", ".") or texts[j] == "["):
            if texts[j] == "[":
                k = j
                while k < len(toks) and not (texts[k] == "]" and toks[k].depth == toks[j].depth):
                    k += 1
                j = k + 1
            else:
                if j + 1 >= len(toks) or toks[j + 1].kind != "id":
                    break
                field = True
                j += 2
        if field and j < len(toks) and (texts[j] in ASSIGN or texts[j] in ("++", "--")):
            out.append(("dropstore", indent + ";"))
    if whole and texts[0] == "*" and len(toks) > 3 and toks[1].kind == "id" and texts[2] in ASSIGN:
        out.append(("dropstore", indent + ";"))
    # droperr / ret0: return -E...; return -errno; x = -E...;
    errval = re.compile(r"^E[A-Z0-9]+$|^errno$")
    if whole and texts[:2] == ["return", "-"] and len(toks) == 4 and errval.match(texts[2]):
        out.append(("droperr", indent + ";"))
        out.append(("ret0", indent + "return 0;"))
    if whole and len(toks) == 5 and toks[0].kind == "id" and texts[1] == "=" and texts[2] == "-" \
            and errval.match(texts[3]):
        out.append(("droperr", indent + ";"))
    # const: numbers on a line that compares, or NAME = value (enums).
    enum_line = len(toks) >= 3 and toks[0].kind == "id" and texts[1] == "=" and texts[-1] == "," \
        and texts[0].isupper()
    if has_rel or enum_line:
        for t in toks:
            if t.kind == "num" and number(t.text, 0) not in ("0", "0x0", "0x0"):
                for delta in (1, -1):
                    n = number(t.text, delta)
                    if n is not None:
                        out.append(("const", splice(line, t.start, t.end, n)))
    return out


def file_mutants(srcdir, path):
    """Every mutant of one file: dicts with file, line (1-based), op, orig, mut."""
    with open(os.path.join(srcdir, path)) as f:
        lines = f.read().split("\n")
    res = []
    seen = set()
    in_comment = False
    for n, line in enumerate(lines, 1):
        toks, in_comment = tokenize(line, in_comment)
        for op, mut in line_mutants(line, toks):
            if mut == line or (n, mut) in seen:
                continue
            seen.add((n, mut))
            res.append({"file": path, "line": n, "op": op, "orig": line, "mut": mut,
                        "prev": lines[n - 2] if n > 1 else ""})
    return res


# --- the scratch trees --------------------------------------------------------

def run(cmd, cwd, log=None, timeout=None):
    with open(log or os.devnull, "a") as lf:
        return subprocess.run(cmd, cwd=cwd, stdout=lf, stderr=subprocess.STDOUT,
                              timeout=timeout).returncode


def copy_tree(srcdir, dest, work):
    """The source tree as it is, without .git, build dirs and the work dir."""
    skip_top = {".git", "autom4te.cache", "fuzz-out"}
    rel_work = os.path.relpath(work, srcdir)
    for root, dirs, files in os.walk(srcdir):
        rel = os.path.relpath(root, srcdir)
        if rel == ".":
            dirs[:] = [d for d in dirs if d not in skip_top and not d.startswith("_build")
                       and d != rel_work and not d.startswith("mutants-")]
        else:
            dirs[:] = [d for d in dirs if os.path.join(rel, d) != rel_work]
        os.makedirs(os.path.join(dest, rel), exist_ok=True)
        for f in files:
            s, d = os.path.join(root, f), os.path.join(dest, rel, f)
            if os.path.islink(s):
                if not os.path.lexists(d):
                    os.symlink(os.readlink(s), d)
                continue
            try:
                same = open(s, "rb").read() == open(d, "rb").read()
            except OSError:
                same = False
            if not same:  # copied with a new mtime: make rebuilds what depends on it
                shutil.copyfile(s, d)
                shutil.copymode(s, d)


class Tree:
    """One scratch tree: WORK/jobN/src (the copy) and WORK/jobN/build."""

    def __init__(self, work, n, root=None):
        self.root = root or os.path.join(work, "job%d" % n)
        self.src = os.path.join(self.root, "src")
        self.build = os.path.join(self.root, "build")
        self.log = os.path.join(self.root, "setup.log")
        self.pristine = {}  # file -> {object: digest}

    def setup(self, srcdir, work, fresh, targets, jobs_make, extra_cfg=()):
        clean = os.path.join(self.src, ".mutants-clean")
        if fresh or not os.path.exists(os.path.join(self.build, "config.status")) \
                or not os.path.exists(clean):
            # Not the whole root: with --tree, the first tree's root holds
            # the others (DIR/tree1 ...).
            shutil.rmtree(self.src, ignore_errors=True)
            shutil.rmtree(self.build, ignore_errors=True)
            os.makedirs(self.build)
            copy_tree(srcdir, self.src, work)
            open(self.log, "w").close()
            if not os.path.exists(os.path.join(self.src, "configure")):
                if run(["./autogen.sh"], self.src, self.log):
                    return "autogen.sh failed (%s)" % self.log
            # A relative srcdir: the same __FILE__ strings in every job tree.
            # --disable-static: the programs link the PIC objects (libpmcore
            # is a convenience library beside the shared libprocmesh); the
            # non-PIC copies would only double each mutant's compile.
            cfg = ["../src/configure", "--disable-static"] \
                + os.environ.get("MUTANTS_CONFIGURE", "").split() + list(extra_cfg)
            if run(cfg, self.build, self.log):
                return "configure failed (%s)" % self.log
        else:
            copy_tree(srcdir, self.src, work)
        open(clean, "w").close()
        if run(["nice", "make", "-j%d" % jobs_make] + targets, self.build, self.log):
            return "the unmutated tree does not build (%s)" % self.log
        return None

    def objects(self, path):
        """The object files compiled from source path (libtool: x.lo names
        .libs/x.o and x.o), found by name in the build tree."""
        d, base = os.path.split(os.path.splitext(path)[0])
        bd = os.path.join(self.build, d)
        res = []
        for f in sorted(os.listdir(bd)) if os.path.isdir(bd) else []:
            if f.endswith(".lo") and (f == base + ".lo" or f.endswith("-" + base + ".lo")):
                res.append(os.path.join(d, f))
        return res

    def digests(self, path):
        """{object: sha256 of the object stripped of debug sections}."""
        out = {}
        for lo in self.objects(path):
            stem = os.path.splitext(lo)[0]
            dd, b = os.path.split(stem)
            for o in (os.path.join(dd, ".libs", b + ".o"), stem + ".o"):
                full = os.path.join(self.build, o)
                if not os.path.exists(full):
                    continue
                tmp = full + ".strip"
                subprocess.run(["objcopy", "--strip-debug", full, tmp], check=True)
                with open(tmp, "rb") as f:
                    out[o] = hashlib.sha256(f.read()).hexdigest()
                os.unlink(tmp)
        return out


def descendants(pid):
    """Every live descendant of pid, read from /proc (parent links)."""
    children = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                stat = f.read()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: fields after its last ')'.
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(d))
    found, pending = [], [pid]
    while pending:
        for c in children.get(pending.pop(), []):
            found.append(c)
            pending.append(c)
    return found


def kill_tree(pid):
    """SIGKILLs pid's process group and the group of every descendant.
    Check's fork mode runs each test in a process group of its own, so a
    program killed at our timeout would leave its test running (a mutant
    that loops spins on, a CPU taken from every later run): the tree is
    read before anything dies, while the parent links still lead to it."""
    for p in [pid] + descendants(pid):
        for kill, target in ((os.killpg, p), (os.kill, p)):
            try:
                kill(target, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def run_program(tree, prog, timeout, log=None, case=None):
    """Runs tests/PROG in tree (only its test case CASE when given), its
    output appended to log; (exit code or 'timeout', seconds)."""
    env = dict(os.environ, CK_FORK="yes", CK_VERBOSITY="silent", PM_TEST_RUN=tree.build)
    env.pop("CK_RUN_CASE", None)
    env.pop("CK_RUN_SUITE", None)
    if case is not None:
        env["CK_RUN_CASE"] = case
    t0 = time.time()
    out = open(log, "a") if log else subprocess.DEVNULL
    if log:
        out.write("== tests/%s\n" % prog)
        out.flush()
    p = subprocess.Popen(["nice", "./tests/" + prog], cwd=tree.build, env=env,
                         stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        rc = p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        rc = "timeout"
    # The program's process group (its workers included) goes with it, and
    # every descendant's group (Check's test child has its own).
    kill_tree(p.pid)
    if rc == "timeout":
        p.wait()
    if log:
        out.write("== exit %s\n" % rc)
        out.close()
    return rc, time.time() - t0


def equiv_key(m):
    """The key of mutant m in equivalent.txt: its file, its operator and
    its mutated line, except for the operators whose mutated line does not
    tell where it is (dropstore and droperr leave `;`, ret0 `return 0;`):
    those are named by the line before and the line they change, as
    `BEFORE ~~ LINE`, so that one entry cannot cover every such statement
    of a file (`return -EINVAL;` is on many lines)."""
    if m["op"] in ("dropstore", "droperr", "ret0"):
        text = m.get("prev", "").strip() + " ~~ " + m["orig"].strip()
    else:
        text = m["mut"].strip()
    return (m["file"], m["op"], text)


def shared_entries(equiv, mutants_of):
    """equiv without the entries that match more than one mutant of a file
    (the same mutated line in two places: a judgement made for one line
    would pass for the other unseen), unless the reason says "judged alike"
    (one judgement written for each of them). Each dropped entry is said
    on stderr with its lines; its mutants are then judged by the tests."""
    out = dict(equiv)
    for f, muts in mutants_of.items():
        lines = {}
        for m in muts:
            k = equiv_key(m)
            if k in equiv:
                lines.setdefault(k, []).append(m["line"])
        for k, where in sorted(lines.items()):
            if len(where) > 1 and "judged alike" not in equiv[k]:
                del out[k]
                print("mutants-auto: equivalent.txt: `%s | %s | %s` matches lines %s of %s: "
                      "not applied (tell the lines apart, or say \"judged alike\" in its "
                      "reason if it holds for each)" % (k[0], k[1], k[2],
                                                        ", ".join(map(str, where)), f),
                      file=sys.stderr, flush=True)
    return out


def read_equivalent(path):
    """equivalent.txt: `FILE | OP | MUTATED LINE | why` per line (for
    dropstore, droperr and ret0, `LINE BEFORE ~~ LINE CHANGED`: equiv_key;
    the mutated line may hold " | ", the reason may not).
    A dict from that key to why."""
    out = {}
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            # The mutated line may itself hold " | " (a C bitwise or): the
            # first two fields from the left, the reason from the right.
            head = line.rstrip("\n").split(" | ", 2)
            parts = [x.strip() for x in head[:2] + head[2].rsplit(" | ", 1)] if len(head) == 3 else []
            if len(parts) != 4 or not all(parts):
                die("%s:%d: want FILE | OPERATOR | MUTATED LINE | WHY" % (path, n))
            key = (parts[0], parts[1], parts[2])
            if key in out:
                # Two lines of a file that read the same after the mutation
                # share one key: one reason must hold for both, not the
                # last one written silently win.
                die("%s:%d: a second reason for %s | %s | %s (write one that holds for "
                    "every line it names)" % ((path, n) + key))
            out[key] = parts[3]
    return out


def try_mutant(tree, mut, progs, targets, timeouts, jobs_make, confirm, cases=None):
    """Applies, judges and reverts one mutant in tree; returns the result.
    cases: (program, test case, seconds) that execute the mutated line
    (--select): those are run first, fastest first; a mutant none of them
    fails (or that no case runs: cases == []) is then judged by the whole
    programs, since gcov misses what runs only in a process that never
    exits normally (a test's child ending in _exit, a worker killed), and
    the verdict must be the whole programs'."""
    src = os.path.join(tree.src, mut["file"])
    with open(src) as f:
        orig = f.read()
    lines = orig.split("\n")
    assert lines[mut["line"] - 1] == mut["orig"], "mutant out of date"
    lines[mut["line"] - 1] = mut["mut"]
    os.unlink(os.path.join(tree.src, ".mutants-clean"))
    res = {"status": None, "by": "", "secs": 0.0, "flaky": []}
    # The programs' output, kept for the mutants a program failed on.
    log = os.path.join(tree.root, "logs", "%s-%d-%s.log" % (
        mut["file"].replace("/", "_"), mut["line"], hashlib.sha1(mut["mut"].encode()).hexdigest()[:8]))
    os.makedirs(os.path.dirname(log), exist_ok=True)
    if os.path.exists(log):
        os.unlink(log)
    t0 = time.time()
    try:
        with open(src, "w") as f:
            f.write("\n".join(lines))
        objs = tree.objects(mut["file"])
        if run(["nice", "make"] + objs, tree.build) != 0:
            res["status"] = "nocompile"
        elif tree.digests(mut["file"]) == tree.pristine[mut["file"]]:
            res["status"] = "equivalent"
        else:
            # Each program is built just before it runs: most mutants are
            # killed by the first, and need nothing else relinked.
            res["status"] = "survived"
            built = set()
            for p, case, secs in sorted(cases or [], key=lambda x: x[2]):
                if p not in built:
                    if run(["nice", "make", "-j%d" % jobs_make] + targets[p], tree.build) != 0:
                        res["status"], res["by"] = "nocompile", p
                        break
                    built.add(p)
                limit = 3 * secs + 30
                rc, _ = run_program(tree, p, limit, log, case)
                if rc in (0, 77):
                    continue
                if confirm and run_program(tree, p, limit, log, case)[0] in (0, 77):
                    res["flaky"].append(p + ":" + case)
                    continue
                res["status"] = "killed"
                res["by"] = "%s:%s%s" % (p, case, " (timeout)" if rc == "timeout" else "")
                break
            whole = cases is None or res["status"] == "survived"
            if cases is not None and whole:
                res["by"] = "(no case run; whole programs)" if not cases else "(whole programs)"
            for p in progs if whole else []:
                if run(["nice", "make", "-j%d" % jobs_make] + targets[p], tree.build) != 0:
                    res["status"], res["by"] = "nocompile", p  # does not link
                    break
                rc, _ = run_program(tree, p, timeouts[p], log)
                if rc in (0, 77):
                    continue
                # A kill is confirmed by a second run: a program that fails
                # now and then on the unmutated tree too (load, timing) must
                # not count as catching the mutant.
                if confirm and run_program(tree, p, timeouts[p], log)[0] in (0, 77):
                    res["flaky"].append(p)  # no verdict from it: on to the next
                    continue
                if rc == "timeout":
                    res["status"], res["by"] = "killed", p + " (timeout)"
                else:
                    res["status"], res["by"] = "killed", p
                break
    finally:
        # New content, new mtime: the next build recompiles the file.
        with open(src, "w") as f:
            f.write(orig)
        open(os.path.join(tree.src, ".mutants-clean"), "w").close()
    res["secs"] = time.time() - t0
    if res["status"] != "killed" and not res["flaky"] and os.path.exists(log):
        os.unlink(log)
    return res


# --- coverage: which test cases execute which line (--select) -------------------

def list_cases(srcdir, prog):
    """The test case names of tests/PROG.c (helpers.h names one per test
    after it, pm_tcase("name") the shared ones): what CK_RUN_CASE selects."""
    with open(os.path.join(srcdir, "tests", prog + ".c")) as f:
        text = f.read()
    names = re.findall(r"PM_ADD_(?:LOOP_)?TEST\s*\(\s*\w+\s*,\s*(\w+)", text)
    names += re.findall(r'pm_tcase\s*\(\s*"([^"]+)"', text)
    return list(dict.fromkeys(names))


def gcov_lines(tree, files):
    """{file: ({executed line}, {executable line})} from the .gcda files in
    tree's build (gcov -t on each file's objects)."""
    out = {f: (set(), set()) for f in files}
    objs = {}
    for f in files:
        for lo in tree.objects(f):
            d, b = os.path.split(os.path.splitext(lo)[0])
            o = os.path.join(tree.build, d, ".libs", b + ".o")
            if os.path.exists(os.path.splitext(o)[0] + ".gcno"):
                objs[o] = f
    if not objs:
        return out
    p = subprocess.run(["gcov", "-t", "-r", "-s", tree.src] + sorted(objs), cwd=tree.build,
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    cur = None
    for line in p.stdout.split("\n"):
        parts = line.split(":", 2)
        if len(parts) < 3:
            continue
        count, n = parts[0].strip(), parts[1].strip()
        if n == "0" and parts[2].startswith("Source:"):
            src = os.path.relpath(os.path.join(tree.build, parts[2][7:]), tree.src) \
                if not os.path.isabs(parts[2][7:]) else os.path.relpath(parts[2][7:], tree.src)
            src = os.path.normpath(src)
            cur = out.get(src)
            if cur is None:
                cur = out.get(next((f for f in files if src.endswith(f)), ""), None)
            continue
        if cur is None or count == "-" or not n.isdigit():
            continue
        cur[1].add(int(n))
        if count[0].isdigit():
            cur[0].add(int(n))
    return out


def collect_coverage(cov, srcdir, files, fmap, work):
    """{file: {"exec": [lines], "lines": {line: [[prog, case, secs]...]}}},
    computed once per source state in the coverage tree (each test case of
    each program map.txt names for the files, alone, its .gcda counts read
    after it) and kept in WORK/coverage.json."""
    h = hashlib.sha256()
    for d in ("src", "tests", "include"):
        for root, _, names in sorted(os.walk(os.path.join(srcdir, d))):
            for nm in sorted(names):
                if nm.endswith((".c", ".h", ".txt")):
                    with open(os.path.join(root, nm), "rb") as f:
                        h.update(nm.encode() + f.read())
    key = h.hexdigest()
    path = os.path.join(work, "coverage.json")
    data = {}
    if os.path.exists(path):
        with open(path) as f:
            old = json.load(f)
        if old.get("key") == key:
            data = old.get("files", {})
    todo = [f for f in files if f not in data]
    if not todo:
        return data
    progs = sorted({p for f in todo for p in fmap[f]})
    for f in todo:
        data[f] = {"exec": set(), "lines": {}}
    t0 = time.time()
    ncases = 0
    for prog in progs:
        for case in list_cases(srcdir, prog):
            for root, _, names in os.walk(cov.build):
                for nm in names:
                    if nm.endswith(".gcda"):
                        os.unlink(os.path.join(root, nm))
            rc, secs = run_program(cov, prog, 900, os.path.join(cov.root, "cases.log"), case)
            ncases += 1
            if rc not in (0, 77):
                # A case that fails unmutated (or times out) decides nothing.
                print("mutants-auto: coverage: %s:%s exit %s: not used" % (prog, case, rc),
                      flush=True)
                continue
            got = gcov_lines(cov, [f for f in todo if prog in fmap[f]])
            for f, (executed, executable) in got.items():
                data[f]["exec"] |= executable
                for n in executed:
                    data[f]["lines"].setdefault(str(n), []).append([prog, case, round(secs, 2)])
    for f in todo:
        data[f]["exec"] = sorted(data[f]["exec"])
    print("mutants-auto: coverage of %d file(s) from %d test cases in %.0f s" % (
        len(todo), ncases, time.time() - t0), flush=True)
    with open(path, "w") as f:
        json.dump({"key": key, "files": data}, f)
    return data


def named_cases(srcdir, m, fc, texts):
    """The cases of a mutant on a line gcov does not count as code that
    defines a name (`#define NAME ...`, an enumerator `NAME = value`): the
    cases that run a code line of the same file using NAME, or [] when code
    lines use it and no case runs them, or None (judge by the whole
    programs) when no code line of the file names it (used only in a
    declaration, a static table or another file)."""
    mm = re.match(r"\s*#\s*define\s+(\w+)", m["orig"]) or \
        re.match(r"\s*(\w+)\s*=\s*[-+(\w]", m["orig"])
    if mm is None:
        return None
    name = mm.group(1)
    if m["file"] not in texts:
        with open(os.path.join(srcdir, m["file"])) as f:
            texts[m["file"]] = f.read().split("\n")
    word = re.compile(r"\b%s\b" % re.escape(name))
    users = [n for n, line in enumerate(texts[m["file"]], 1)
             if n != m["line"] and n in fc["exec"] and word.search(line)]
    if not users:
        return None
    seen, cases = set(), []
    for n in users:
        for c in fc["lines"].get(str(n), []):
            if (c[0], c[1]) not in seen:
                seen.add((c[0], c[1]))
                cases.append(c)
    return cases


# --- the report ---------------------------------------------------------------

def score(k, s):
    return 100.0 * k / (k + s) if k + s else 100.0


def report(args, files, muts, results, elapsed, path):
    by = {f: {"total": 0, "nocompile": 0, "equivalent": 0, "killed": 0, "survived": 0,
              "timeout": 0, "flaky": 0} for f in files}
    for m, r in zip(muts, results):
        if r is None:
            continue
        c = by[m["file"]]
        c["total"] += 1
        c[r["status"]] += 1
        if r["by"].endswith("(timeout)"):
            c["timeout"] += 1
        if r.get("flaky"):
            c["flaky"] += 1
    k = sum(c["killed"] for c in by.values())
    s = sum(c["survived"] for c in by.values())
    lines = []
    lines.append("procmesh mutation score, %s" % datetime.date.today().isoformat())
    lines.append("machine: nproc %d, kernel %s; %d job(s); %.0f s" % (
        os.cpu_count(), platform.release(), args.jobs, elapsed))
    lines.append("command: %s" % " ".join(sys.argv))
    if args.sample:
        lines.append("sample: %d mutants, seed %d" % (args.sample, args.seed))
    if args.programs:
        lines.append("only the first %d program(s) of each file's map.txt line" % args.programs)
    lines.append("")
    cols = ("total", "nocompile", "equivalent", "killed", "survived", "timeout", "flaky")
    lines.append("%-26s %6s %6s %6s %6s %6s %6s %7s %7s" % (
        "file", "total", "nocomp", "equiv", "killed", "surv", "timeout", "flaky", "score"))
    rows = [(f, c) for f, c in by.items() if c["total"]]
    rows.append(("all", {x: sum(c[x] for c in by.values()) for x in cols}))
    for f, c in rows:
        lines.append("%-26s %6d %6d %6d %6d %6d %6d %7d %6.1f%%" % (
            (f,) + tuple(c[x] for x in cols) + (score(c["killed"], c["survived"]),)))
    lines.append("")
    lines.append("score = killed / (killed + survived); mutants that do not compile and")
    lines.append("equivalent ones (object byte-identical after objcopy --strip-debug, or judged")
    lines.append("so in tests/mutants/equivalent.txt, with the reason) are not scored. A timeout counts as killed. A program's failure counts only")
    lines.append("if it fails again when rerun on the same mutant; \"flaky\" counts the mutants")
    lines.append("where a program failed once then passed (no verdict from it: the next")
    lines.append("program judged; listed below).")
    lines.append("")
    lines.append("survivors:")
    for m, r in zip(muts, results):
        if r and r["status"] == "survived":
            lines.append("  %s:%d  %-9s %s" % (m["file"], m["line"], m["op"], m["orig"].strip()))
            lines.append("  %s %-9s -> %s%s" % (" " * len("%s:%d" % (m["file"], m["line"])), "",
                                                 m["mut"].strip(),
                                                 "  [%s]" % r["by"] if r.get("by") else ""))
    lines.append("")
    lines.append("flaky (a program failed once, then passed on the same mutant):")
    for m, r in zip(muts, results):
        if r and r.get("flaky"):
            lines.append("  %s:%d  %-9s %s  [%s; then %s]" % (
                m["file"], m["line"], m["op"], m["mut"].strip(), " ".join(r["flaky"]),
                r["status"]))
    lines.append("")
    lines.append("equivalent (not scored):")
    for m, r in zip(muts, results):
        if r and r["status"] == "equivalent":
            lines.append("  %s:%d  %-9s %s -> %s%s" % (
                m["file"], m["line"], m["op"], m["orig"].strip(), m["mut"].strip(),
                "  [judged: %s]" % r["by"] if r["by"] else ""))
    text = "\n".join(lines) + "\n"
    with open(path, "w") as f:
        f.write(text)
    return text, score(k, s)


# --- main -------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("files", nargs="*")
    ap.add_argument("--srcdir", default=os.path.dirname(os.path.dirname(HERE)))
    ap.add_argument("--work", default=os.path.abspath("mutants-auto"))
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("MUTANTS_JOBS", "1") or 1))
    ap.add_argument("--sample", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--min-score", default=None)
    ap.add_argument("--report", default=None)
    ap.add_argument("--timeout", type=float,
                    default=float(os.environ["MUTANT_TIMEOUT"]) if os.environ.get("MUTANT_TIMEOUT")
                    else None)
    ap.add_argument("--slack", type=float, default=60.0)
    ap.add_argument("--tree", default=None)
    ap.add_argument("--programs", type=int, default=0)
    ap.add_argument("--no-confirm", action="store_true")
    ap.add_argument("--lines", action="append", default=[])
    ap.add_argument("--fresh", action="store_true")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--select", action="store_true")
    ap.add_argument("-h", "--help", action="store_true")
    args = ap.parse_args()
    if args.help:
        print(__doc__)
        return 0
    srcdir = os.path.abspath(args.srcdir)
    work = os.path.abspath(args.work)
    if os.path.exists(os.path.join(srcdir, "config.status")):
        die("%s is configured in tree; build out of tree" % srcdir)
    fmap = read_map(os.path.join(srcdir, "tests", "mutants", "map.txt"))
    files = args.files or list(fmap)
    for f in files:
        if f not in fmap:
            die("%s is not in tests/mutants/map.txt" % f)
        if not os.path.exists(os.path.join(srcdir, f)):
            die("%s (map.txt) does not exist" % f)
        for p in fmap[f]:
            if not os.path.exists(os.path.join(srcdir, "tests", p + ".c")):
                die("map.txt: %s: no tests/%s.c" % (f, p))
    if args.programs > 0:
        fmap = {f: p[:args.programs] for f, p in fmap.items()}
    muts = []
    for f in files:
        muts += file_mutants(srcdir, f)
    # Several --lines add up: a mutant is kept when one of the ranges that
    # apply to its file (named, or with no file) covers its line; a file
    # that no range applies to keeps every mutant.
    ranges = []
    for spec in args.lines:
        lf, _, rng = spec.rpartition(":")
        m = re.fullmatch(r"(\d+)(?:-(\d*))?", rng)
        if not m or (lf and lf not in files):
            die("--lines %s: want [FILE:]A[-B], FILE one of the selected files" % spec)
        lo = hi = int(m.group(1))
        if m.group(2) is not None:
            hi = int(m.group(2)) if m.group(2) else sys.maxsize
        ranges.append((lf, lo, hi))
    if ranges:
        def kept(x):
            mine = [(lo, hi) for lf, lo, hi in ranges if not lf or lf == x["file"]]
            return not mine or any(lo <= x["line"] <= hi for lo, hi in mine)
        muts = [x for x in muts if kept(x)]
    if args.sample:
        idx = sorted(random.Random(args.seed).sample(range(len(muts)), min(args.sample, len(muts))))
        muts = [muts[i] for i in idx]
    equiv = read_equivalent(os.path.join(srcdir, "tests", "mutants", "equivalent.txt"))
    equiv = shared_entries(equiv, {f: file_mutants(srcdir, f) for f in files})
    if args.list:
        every = {equiv_key(x) for f in fmap for x in file_mutants(srcdir, f)}
        for k in equiv:
            if k not in every:
                print("# equivalent.txt: no such mutant (remove the entry): %s | %s | %s" % k,
                      file=sys.stderr)
        for m in muts:
            print("%s:%d\t%s\t%s" % (m["file"], m["line"], m["op"], m["mut"].strip()))
        counts = {}
        for m in muts:
            counts[m["file"]] = counts.get(m["file"], 0) + 1
        for f in files:
            print("# %s: %d mutants" % (f, counts.get(f, 0)), file=sys.stderr)
        return 0
    if not muts:
        die("no mutants")
    files = [f for f in files if any(m["file"] == f for m in muts)]
    progs = sorted({p for f in files for p in fmap[f]})
    ptargets = {p: helpers_of(srcdir, p) for p in progs}
    targets = sorted({t for p in progs for t in ptargets[p]})
    os.makedirs(work, exist_ok=True)
    start = time.time()
    jobs = max(1, args.jobs)
    args.jobs = jobs
    print("mutants-auto: %d mutants in %d file(s), %d job(s); scratch trees in %s" % (
        len(muts), len(files), jobs, work), flush=True)
    if args.tree:
        # The trees of run.sh (make mutants-ci built them just before): the
        # same names, so that neither script builds a tree the other has.
        top = os.path.abspath(args.tree)
        trees = [Tree(work, n, top if n == 0 else os.path.join(top, "tree%d" % n))
                 for n in range(jobs)]
    else:
        trees = [Tree(work, n) for n in range(jobs)]
    with concurrent.futures.ThreadPoolExecutor(jobs) as ex:
        errs = list(ex.map(lambda t: t.setup(srcdir, work, args.fresh, targets,
                                             max(1, (os.cpu_count() or 1) // jobs)), trees))
    for e in errs:
        if e:
            die(e)
    for t in trees:
        for f in files:
            t.pristine[f] = t.digests(f)
            if not t.pristine[f]:
                die("no object file found for %s in %s" % (f, t.build))
    print("mutants-auto: scratch trees built in %.0f s" % (time.time() - start), flush=True)
    coverage = {}
    if args.select:
        cov = Tree(work, 0, os.path.join(work, "cov"))
        e = cov.setup(srcdir, work, args.fresh, targets, os.cpu_count() or 1,
                      ["CFLAGS=-O0 -g --coverage", "LDFLAGS=--coverage"])
        if e:
            die("coverage tree: " + e)
        coverage = collect_coverage(cov, srcdir, files, fmap, work)

    # Baseline: every program passes unmutated, else nothing is judged.
    timeouts = {}
    pq = queue.Queue()
    for t in trees:
        pq.put(t)

    def baseline(p):
        # A program that fails here once and passes when run again is flaky
        # (under load, say), not broken: it may kill a mutant now and then
        # by itself, which only raises the score. Twice is a broken test.
        t = pq.get()
        log = os.path.join(work, "baseline-%s.log" % p)
        try:
            if os.path.exists(log):
                os.unlink(log)
            runs = [run_program(t, p, args.timeout or 1800, log)]
            if runs[0][0] not in (0, 77):
                runs.append(run_program(t, p, args.timeout or 1800, log))
            return p, runs
        finally:
            pq.put(t)
    with concurrent.futures.ThreadPoolExecutor(jobs) as ex:
        for p, runs in ex.map(baseline, progs):
            rc, secs = runs[-1]
            if len(runs) > 1:
                print("mutants-auto: baseline tests/%-16s exit %s in %.0f s, then (flaky?) "
                      "exit %s in %.0f s; output in %s" % (
                          p, runs[0][0], runs[0][1], rc, secs,
                          os.path.join(work, "baseline-%s.log" % p)), flush=True)
            else:
                print("mutants-auto: baseline tests/%-16s exit %s in %.0f s" % (p, rc, secs),
                      flush=True)
            if rc not in (0, 77):
                die("tests/%s fails unmutated, twice (exit %s): fix it first, or every mutant "
                    "of its files would look killed" % (p, rc))
            timeouts[p] = args.timeout or (3 * secs + args.slack)

    results = [None] * len(muts)
    lock = threading.Lock()
    done = [0]

    stop = threading.Event()

    texts = {}

    def one(i):
        if stop.is_set():
            return None
        m = muts[i]
        why = equiv.get(equiv_key(m))
        fc = coverage.get(m["file"])
        cases = None
        if fc is not None and m["line"] in fc["exec"]:
            cases = fc["lines"].get(str(m["line"]), [])
        elif fc is not None:
            cases = named_cases(srcdir, m, fc, texts)
        if why is not None:
            r = {"status": "equivalent", "by": why, "secs": 0.0, "flaky": []}
        else:
            # A line no case runs by gcov's count (cases == []) is judged by
            # the whole programs: gcov writes its counts when a process exits
            # normally, and a line run only in a test's child that ends in
            # _exit, or in a worker killed, is not counted.
            t = pq.get()
            try:
                r = try_mutant(t, m, fmap[m["file"]], ptargets, timeouts, 1, not args.no_confirm,
                               cases)
            finally:
                pq.put(t)
        with lock:
            results[i] = r
            done[0] += 1
            print("[%d/%d] %s:%d %-9s %-10s %-26s %4.0f s  %s%s" % (
                done[0], len(muts), m["file"], m["line"], m["op"], r["status"], r["by"],
                r["secs"], m["mut"].strip(),
                "  (flaky: %s)" % " ".join(r["flaky"]) if r["flaky"] else ""), flush=True)
        return r
    ex = concurrent.futures.ThreadPoolExecutor(jobs)
    futs = [ex.submit(one, i) for i in range(len(muts))]
    try:
        for fu in futs:
            fu.result()
    except KeyboardInterrupt:
        # The mutants being judged finish (and are reverted); no new one starts.
        print("mutants-auto: interrupted; finishing the mutants under way", file=sys.stderr)
        stop.set()
        ex.shutdown(wait=True, cancel_futures=True)
    ex.shutdown(wait=True)
    rpath = args.report or os.path.join(work, "report.txt")
    text, sc = report(args, files, muts, results, time.time() - start, rpath)
    print()
    print(text)
    print("mutants-auto: report in %s" % rpath)
    if args.min_score is not None:
        ms = args.min_score
        if ms == "ci":
            with open(os.path.join(srcdir, "tests", "mutants", "ci-threshold.txt")) as f:
                ms = next(l.split()[0] for l in f if l.strip() and not l.startswith("#"))
        if sc < float(ms):
            print("mutants-auto: score %.1f%% is below the threshold %s%%" % (sc, ms))
            return 1
        print("mutants-auto: score %.1f%% (threshold %s%%)" % (sc, ms))
    return 0


if __name__ == "__main__":
    sys.exit(main())
