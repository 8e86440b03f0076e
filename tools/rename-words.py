#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""rename-words.py - one meaning per word (issue 24, point 5).

Applies the vocabulary of doc/glossary.md to a tree of procmesh:

  channel    the shared-memory pair between the hub and one worker
             (memfd: control block + two rings, two doorbells, fd socket);
             was "link" (pm__link, channel/link.c, slot.link, ...)
  peer link  the TCP connection to a peer supervisor (unchanged: "link"
             now means only this)
  port       the hub's attachment for one endpoint (unchanged)
  main       the supervisor's own endpoint, node 0 (unchanged; the file of
             its public messaging calls becomes cluster_messaging.c)
  spare      only the prepared next-incarnation channel; the mesh's fd
             held for running out of fds becomes the "reserve fd"

and spells out abbreviations (pm__hl_*, lwtab, rinflight, mbpart, mreq,
mconn, fheld/wheld).

Run from anywhere inside the tree (or give its top as the one argument):
    python3 tools/rename-words.py [TOP]        apply, then self-check
    python3 tools/rename-words.py --check [TOP] self-check only
It git-mv's renamed files, rewrites identifiers on whole-identifier
boundaries, file names wherever they are named, a few comment phrases,
links doc/glossary.md from doc/design.md and Makefile.am's EXTRA_DIST,
then greps for every old name and prints any left (exit 1 if one is).
Idempotent: a second run changes nothing.

Left alone on purpose: include/procmesh.h, NEWS (history), the fuzz
corpus, this script and doc/glossary.md (they name the old words), string
literals in C for the phrase and field rules (log keys, metric names,
messages users see), wire names (PMLINK, procmesh-link/1), and the peer
link's own names (pm__hub_link_*, hub_link*.c, linkfrag, check_link).
"""
import os
import re
import subprocess
import sys

# ----------------------------------------------------------------- the map

# Files: old path -> new path (git mv).
FILE_MOVES = [
    ("src/channel/link.c", "src/channel/channel.c"),
    ("src/channel/link.h", "src/channel/channel.h"),
    ("src/supervisor/main_port.c", "src/supervisor/cluster_messaging.c"),
]

# File names as other files name them. Keys are regexes; the lookbehind
# keeps hub_link.c, fuzz_link.c, check_link.c and the system <link.h>.
FILE_NAME_SUBS = [
    (r"(?<![\w.<-])link\.([ch])\b", r"channel.\1"),
    (r"(?<![\w.-])main_port\.c\b", r"cluster_messaging.c"),
]

# Whole identifiers, everywhere (code, comments, docs, strings).
IDENTS = {
    # the shared-memory pair: channel
    "pm__link": "pm__channel",
    "PM__LINK_MAX_FRAME": "PM__CHANNEL_MAX_FRAME",
    "PM__LINK_NFDS": "PM__CHANNEL_NFDS",
    "PM_LINK_H": "PM_CHANNEL_H",
    "pm__node_from_hub_link": "pm__node_from_hub_channel",
    "pm_test_node_link": "pm_test_node_channel",
    # spare: only the prepared channel; the mesh's fd is its reserve
    "spare_fd": "reserve_fd",
    "pm__mesh_spare_reopen": "pm__mesh_reserve_fd_reopen",
    # abbreviations of the hub's peer-link port
    "pm__lwin": "pm__hub_link_window",
    "pm__lwtab": "pm__hub_link_window_table",
    "pm__hl_lw_clear": "pm__hub_link_windows_clear",
    "pm__hl_link_hold": "pm__hub_link_queue_hold",
    "pm__rinflight": "pm__remote_inflight",
    "PM__RINFLIGHT_MAX": "PM__REMOTE_INFLIGHT_MAX",
    "fheld_head": "frag_held_head",
    "fheld_tail": "frag_held_tail",
    "wheld_head": "window_held_head",
    "wheld_tail": "window_held_tail",
    "rport": "remote_port",
    # main's requests and mesh broadcasts
    "pm__mreq": "pm__main_request",
    "PM__MREQ_WAITING": "PM__MAIN_REQUEST_WAITING",
    "PM__MREQ_REMOTE": "PM__MAIN_REQUEST_REMOTE",
    "pm__hub_mreq_dispatch_waiting": "pm__hub_main_request_dispatch_waiting",
    "pm__hub_mreq_expire": "pm__hub_main_request_expire",
    "mreqs": "main_requests",
    "nmreqs": "main_request_count",
    "pm__mbpart": "pm__mesh_broadcast_part",
    "pm__mbcast": "pm__mesh_broadcast",
    "mbcasts": "mesh_broadcasts",
    # the mesh's connection
    "pm__mconn": "pm__mesh_conn",
}

# Prefixes: every identifier starting with the old prefix (so names added
# by later work are caught too). Applied after IDENTS.
PREFIXES = [
    ("pm__link_", "pm__channel_"),   # pm__link_create, _close, _ctl, ...
    ("pm__hl_", "pm__hub_link_"),    # the link port's internal calls
    ("pm__mconn_", "pm__mesh_conn_"),
    ("pm__hub_mreq_", "pm__hub_main_request_"),
    ("pm__hub_mbcast_", "pm__hub_mesh_broadcast_"),
    ("mreq_", "main_request_"),      # hub_main.c's statics and fields
]

# Whole identifiers in some files only (statics whose word is generic).
SCOPED_IDENTS = {
    "src/channel/channel.c": {"link_size": "channel_size"},
    "src/supervisor/incarnation.c": {
        "link_take": "channel_take", "link_new": "channel_new",
        "drop_link": "drop_channel", "take_link": "take_channel"},
    "src/supervisor/standby.c": {"link_take": "channel_take"},
    "fuzz/fuzz_wport.h": {"link_fresh": "channel_fresh"},
    "fuzz/fuzz_hub.c": {"link_fresh": "channel_fresh"},
    "fuzz/fuzz_link.c": {"link_fresh": "channel_fresh"},
    "tests/check_spare.c": {"count_link_maps": "count_channel_maps"},
    "src/hub/hub_linkflow.c": {"lw_find": "window_find", "lw_get": "window_get",
                               "lw_del": "window_del"},
}

# C code (and comments, not strings): the member `link` of pm__port,
# pm__slot, pm_node, the fuzz ports (always a pm__channel) and any
# variable declared as a pm__channel.
FIELD_SUBS = [
    (r"(->|\.)link\b", r"\1channel"),
    (r"(?<![\w/.<-])link\.(memfd|hub_efd|node_efd|sock|node_sock|map|tx|rx|rx_seq|tx_seq)\b",
     r"channel.\1"),
    (r"\b(pm__channel\s*\*?\s*(?:const\s+)?)link\b", r"\1channel"),
]
# Files whose code uses a bare `link` only for a pm__channel variable.
BARE_LINK_FILES = {"src/hub/port.c"}

# Comment and prose phrases where "link" is the channel beyond doubt.
PHRASES = [
    ("spare links", "spare channels"),
    ("spare link", "spare channel"),
    ("Spare link", "Spare channel"),
    ("spare fd", "reserve fd"),
    ("incarnation's link", "incarnation's channel"),
    ("prepared link", "prepared channel"),
    ("replacement's link", "replacement's channel"),
    ("successor's link", "successor's channel"),
    ("slots' links", "slots' channels"),
    ("worker's link", "worker's channel"),
    ("shared-memory link", "shared-memory channel"),
    ("the link the child runs on", "the channel the child runs on"),
    ("over the hub's link as", "over the hub's channel as"),
    ("sequence of d's link", "sequence of d's channel"),
    ("take a link", "take a channel"),
    ("ring, link, frame", "ring, channel, frame"),
    ("sealed memfd, link, frame header", "sealed memfd, channel, frame header"),
    ("memfds (the links)", "memfds (the channels)"),
]

# Files whose subject is the channel: in their comments a bare "link"
# becomes "channel", except on a comment line that speaks of the network
# (GUARD), where "link" may be the peer link; review_list prints the rest.
TOPIC_FILES = ("src/channel/channel.c", "src/channel/channel.h", "src/worker/",
               "src/supervisor/incarnation.", "src/supervisor/standby",
               "src/supervisor/types.h", "tests/check_spare.c", "tests/check_ring.c")
GUARD = re.compile(r"peer|mesh|host|TCP|remote|socket|fd links|symlink|libprocmesh|hub_link|Noise")
TOPIC_WORD = re.compile(r"(?<![\w/.<'-])([Ll])ink(s?)\b(?![.-]\w)")

# Never touched.
EXCLUDE_EXACT = {"include/procmesh.h", "NEWS", "tools/rename-words.py",
                 "tools/rename-words.sh", "doc/glossary.md"}
EXCLUDE_PREFIX = ("fuzz/corpus/", "doc/img/", "tests/data/")
# Prose only, for the phrase rule: no man page (what users read) and no
# history (benchmarks.md tells what was measured in the words of then).
NO_PHRASES = ("doc/man3/", "doc/procmesh.1", "doc/procmesh.7", "doc/pm-bench.1",
              "doc/benchmarks.md")

C_EXT = (".c", ".h")

# --------------------------------------------------------------- machinery

W = r"(?<![A-Za-z0-9_])"
E = r"(?![A-Za-z0-9_])"


def ident_re(names):
    alts = sorted(names, key=len, reverse=True)
    return re.compile(W + "(" + "|".join(map(re.escape, alts)) + ")" + E)


IDENT_RE = ident_re(IDENTS)
PREFIX_RES = [(re.compile(W + re.escape(o) + r"([A-Za-z0-9_]+)"), n) for o, n in PREFIXES]
FILE_RES = [(re.compile(p), r) for p, r in FILE_NAME_SUBS]
FIELD_RES = [(re.compile(p), r) for p, r in FIELD_SUBS]
PHRASE_RES = [(re.compile(r"(?<![\w'-])" + re.escape(o) + r"(?![\w'-])"), n) for o, n in PHRASES]
BARE_LINK_RE = re.compile(W + "link" + E)
# C: comments, then string and char literals; the rest is code.
C_TOKEN = re.compile(r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'", re.S)


def sub_idents(text, path):
    text = IDENT_RE.sub(lambda m: IDENTS[m.group(1)], text)
    for rx, new in PREFIX_RES:
        text = rx.sub(lambda m, new=new: new + m.group(1), text)
    scoped = SCOPED_IDENTS.get(path)
    if scoped:
        text = ident_re(scoped).sub(lambda m: scoped[m.group(1)], text)
    for rx, new in FILE_RES:
        text = rx.sub(new, text)
    return text


def sub_fields(text):
    for rx, new in FIELD_RES:
        text = rx.sub(new, text)
    return text


def sub_phrases(text):
    for rx, new in PHRASE_RES:
        text = rx.sub(new, text)
    return text


def sub_topic(comment):
    lines = comment.split("\n")
    for i, line in enumerate(lines):
        if not GUARD.search(line):
            lines[i] = TOPIC_WORD.sub(lambda m: ("Channel" if m.group(1) == "L" else "channel")
                                      + m.group(2), line)
    return "\n".join(lines)


def rewrite_c(text, path):
    """Identifiers and file names everywhere; fields in code and comments;
    phrases in comments; a bare `link` in code of BARE_LINK_FILES."""
    out, pos = [], 0
    for m in C_TOKEN.finditer(text):
        out.append(("code", text[pos:m.start()]))
        tok = m.group(0)
        out.append(("comment" if tok.startswith("/") else "string", tok))
        pos = m.end()
    out.append(("code", text[pos:]))
    res = []
    for kind, s in out:
        s = sub_idents(s, path)
        if kind != "string":
            s = sub_fields(s)
        if kind == "comment":
            s = sub_phrases(s)
            if path.startswith(TOPIC_FILES):
                s = sub_topic(s)
        if kind == "code" and path in BARE_LINK_FILES:
            s = BARE_LINK_RE.sub("channel", s)
        res.append(s)
    return "".join(res)


TRAILING = re.compile(r"^(.*?\S)( +)(/\*.*)$")


def keep_columns(old, new):
    """A renamed line keeps its trailing comment in the column it was
    aligned to (two or more spaces before it), where it still fits."""
    olines, nlines = old.split("\n"), new.split("\n")
    if len(olines) != len(nlines):
        return new
    for i, (o, n) in enumerate(zip(olines, nlines)):
        if o == n:
            continue
        mo, mn = TRAILING.match(o), TRAILING.match(n)
        if not mo or not mn or len(mo.group(2)) < 2:
            continue
        col = len(mo.group(1)) + len(mo.group(2))
        pad = max(1, col - len(mn.group(1)))
        nlines[i] = mn.group(1) + " " * pad + mn.group(3)
    return "\n".join(nlines)


def rewrite(text, path):
    if path.endswith(C_EXT):
        return keep_columns(text, rewrite_c(text, path))
    if path.endswith(".mut"):
        return rewrite_mut(text, path)
    text = sub_idents(text, path)
    if path.endswith(".md") and not path.startswith(NO_PHRASES):
        text = sub_phrases(text)
    if path == "doc/design.md":
        text = design_uses(text)
    return text


MUT_BLOCK = re.compile(r"(^--- find\n)(.*?)(^--- replace\n)(.*?)(^--- end)", re.S | re.M)


def mut_file(text):
    m = re.search(r"^file: *(\S+)", text, re.M)
    return m.group(1) if m else ""


def rewrite_mut(text, path):
    """A mutant: its header as prose, its snippets as C of its file, so a
    snippet stays equal to the lines it finds once those are renamed."""
    text = sub_idents(text, path)
    target = mut_file(text)

    def block(m):
        find, repl = m.group(2), m.group(4)
        find = keep_columns(find, rewrite_c(find, target))
        repl = keep_columns(repl, rewrite_c(repl, target))
        return m.group(1) + find + m.group(3) + repl + m.group(5)

    return MUT_BLOCK.sub(block, text)


def stale_mutants(top):
    """The mutants whose find snippet is not found exactly once."""
    stale = set()
    d = os.path.join(top, "tests/mutants")
    if not os.path.isdir(d):
        return stale
    for name in sorted(os.listdir(d)):
        if not name.endswith(".mut"):
            continue
        with open(os.path.join(d, name), encoding="utf-8") as f:
            text = f.read()
        target = os.path.join(top, mut_file(text))
        m = MUT_BLOCK.search(text)
        if not m or not os.path.isfile(target):
            stale.add(name)
            continue
        with open(target, encoding="utf-8") as f:
            src = f.read()
        if src.count(m.group(2)) != 1:
            stale.add(name)
    return stale


def design_uses(text):
    """design.md's module table: the module `link` in a row's "uses"
    column (| files | what | uses | system calls |) is the channel."""
    out = []
    for line in text.split("\n"):
        if line.startswith("| `src/"):
            cells = line.split("|")
            if len(cells) >= 5:
                cells[-3] = re.sub(r"(?<![\w-])link(?![\w-])(?! port)", "channel", cells[-3])
                line = "|".join(cells)
        out.append(line)
    return "\n".join(out)


def git(top, *args):
    return subprocess.run(["git", "-C", top] + list(args), check=True,
                          stdout=subprocess.PIPE, text=True).stdout


def tracked(top):
    for p in git(top, "ls-files", "-z").split("\0"):
        if not p or p in EXCLUDE_EXACT or p.startswith(EXCLUDE_PREFIX):
            continue
        full = os.path.join(top, p)
        if not os.path.isfile(full) or os.path.islink(full):
            continue
        try:
            with open(full, encoding="utf-8") as f:
                text = f.read()
        except (UnicodeDecodeError, OSError):
            continue  # binary
        if "\0" in text:
            continue
        yield p, full, text


def move_files(top):
    moved = 0
    for old, new in FILE_MOVES:
        o, n = os.path.join(top, old), os.path.join(top, new)
        if os.path.exists(o) and os.path.exists(n):
            sys.exit(f"rename-words: both {old} and {new} exist; merge them by hand first")
        if os.path.exists(o):
            git(top, "mv", old, new)
            moved += 1
    return moved


def link_glossary(top):
    """doc/design.md points at doc/glossary.md; Makefile.am ships it."""
    changed = 0
    design = os.path.join(top, "doc/design.md")
    if os.path.exists(os.path.join(top, "doc/glossary.md")) and os.path.exists(design):
        with open(design, encoding="utf-8") as f:
            text = f.read()
        if "glossary.md" not in text:
            line = ("The words of the code, one meaning each (channel, peer link, port, "
                    "main, spare), are in doc/glossary.md.\n\n")
            m = re.search(r"^# .*\n\n", text, re.M)
            if m:
                text = text[:m.end()] + line + text[m.end():]
                with open(design, "w", encoding="utf-8") as f:
                    f.write(text)
                changed += 1
        am = os.path.join(top, "Makefile.am")
        with open(am, encoding="utf-8") as f:
            text = f.read()
        if "doc/glossary.md" not in text:
            new = re.sub(r"(^EXTRA_DIST = .*?)\bdoc/design\.md\b", r"\1doc/design.md doc/glossary.md",
                         text, count=1, flags=re.M)
            if new != text:
                with open(am, "w", encoding="utf-8") as f:
                    f.write(new)
                changed += 1
    return changed


# --------------------------------------------------------------- self-check

OLD_IDENTS = set(IDENTS)
OLD_PREFIX_RE = re.compile(W + "(" + "|".join(re.escape(o) for o, _ in PREFIXES) + r")[A-Za-z0-9_]+")
OLD_FILE_RES = [re.compile(p) for p, _ in FILE_NAME_SUBS]


def self_check(top):
    left = 0
    any_ident = ident_re(OLD_IDENTS)
    for old, new in FILE_MOVES:
        if os.path.exists(os.path.join(top, old)):
            print(f"left: file {old} (should be {new})")
            left += 1
    for p, full, text in tracked(top):
        scoped = SCOPED_IDENTS.get(p)
        scoped_re = ident_re(scoped) if scoped else None
        is_c = p.endswith(C_EXT) or p.endswith(".mut")
        for n, line in enumerate(text.splitlines(), 1):
            hits = [m.group(0) for m in any_ident.finditer(line)]
            hits += [m.group(0) for m in OLD_PREFIX_RE.finditer(line)]
            hits += [m.group(0) for rx in OLD_FILE_RES for m in rx.finditer(line)]
            if scoped_re:
                hits += [m.group(0) for m in scoped_re.finditer(line)]
            if is_c:
                hits += [m.group(0) for m in FIELD_RES[0][0].finditer(line)
                         if '"' not in line]
            for h in hits:
                print(f"left: {p}:{n}: {h}: {line.strip()[:120]}")
                left += 1
    return left


def review_list(top):
    """Comments where a bare "link" may still mean the channel: the files
    whose subject is the channel. Printed for a human, never an error."""
    topics = ("src/channel/channel.", "src/worker/", "src/supervisor/incarnation.",
              "src/supervisor/standby", "src/supervisor/types.h", "src/hub/port.c",
              "src/hub/hub_queue.c", "tests/check_spare.c", "tests/check_ring.c")
    rx = re.compile(r"(?<!peer )(?<![\w/-])links?\b(?! (?:libprocmesh|port))")
    n = 0
    for p, full, text in tracked(top):
        if not p.startswith(topics):
            continue
        for i, line in enumerate(text.splitlines(), 1):
            s = line.strip()
            if (s.startswith(("/*", "*", "//")) or "/*" in s) and rx.search(line):
                print(f"review: {p}:{i}: {s[:110]}")
                n += 1
    return n


def collisions(top):
    """A new name that already names something else would merge two
    things: refuse before touching anything."""
    new_of = {}
    seen = set()
    for p, full, text in tracked(top):
        seen.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))
    for old in seen:
        for o, n in PREFIXES:
            if old.startswith(o):
                new_of[old] = n + old[len(o):]
        if old in IDENTS:
            new_of[old] = IDENTS[old]
    bad = [(o, n) for o, n in new_of.items() if o in seen and n in seen]
    for o, n in sorted(bad):
        print(f"rename-words: {o} -> {n}, but {n} already exists")
    applied = any(os.path.exists(os.path.join(top, new)) for _, new in FILE_MOVES)
    if bad and not applied:
        sys.exit("rename-words: name collisions (above); nothing changed")
    if bad:
        print("rename-words: this tree was renamed before: old names merged in since are renamed too")


def main(argv):
    check_only = "--check" in argv
    args = [a for a in argv if not a.startswith("--")]
    start = args[0] if args else os.getcwd()
    top = git(start, "rev-parse", "--show-toplevel").strip()
    stale_before = stale_mutants(top)
    if not check_only:
        collisions(top)
        moved = move_files(top)
        changed = 0
        for p, full, text in tracked(top):
            new = rewrite(text, p)
            if new != text:
                with open(full, "w", encoding="utf-8") as f:
                    f.write(new)
                changed += 1
        changed += link_glossary(top)
        print(f"rename-words: {moved} file(s) moved, {changed} file(s) rewritten")
    left = self_check(top)
    for name in sorted(stale_mutants(top) - stale_before):
        print(f"left: tests/mutants/{name}: its find snippet is no longer found once")
        left += 1
    if "--review" in argv:
        review_list(top)
    if left:
        print(f"rename-words: {left} old name(s) left (above)")
        return 1
    print("rename-words: no old name left")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
