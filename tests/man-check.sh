#!/bin/sh
# SPDX-License-Identifier: MIT
# man-check.sh - every function libprocmesh exports has a man page, and the pages are true.
#
# 1. Every exported symbol (nm -D --defined-only of the built shared library,
#    names starting with pm_) has doc/man3/<name>.3: a group page, or a
#    one-line ".so man3/<group>.3" stub naming one; the group page lists the
#    name in NAME and declares it in SYNOPSIS.
# 2. Nothing stale: every stub, and every name a page's NAME lists, is
#    exported; every page is listed in Makefile.am (so it is installed and
#    distributed).
# 3. Every group page's SYNOPSIS (its .nf/.fi or .EX/.EE blocks, roff
#    stripped) compiles after #include <procmesh.h>: a prototype that
#    disagrees with the header is a "conflicting types" error. Every block
#    under EXAMPLES is a complete program and compiles too.
# 4. groff -man -ww reports no warning (skipped, with a message, without groff).
# 5. Every field of a public struct in include/procmesh.h is listed (a
#    declaration in a block, .B/.I, \fB..\fR) in a page that names the
#    struct's type; every value of a public enum likewise in a page naming
#    the enum's type (any page when none names it).
# Paths: the sources from this script's place, the build from PM_BUILD_DIR
# (default: the current directory, where make check runs it); the compiler
# from PM_CC (set by Makefile.am to the configured CC), else CC, else cc.
# Exit: 0 all good, 1 a problem (each one named on stderr).
set -eu

top_srcdir=$(cd "$(dirname "$0")/.." && pwd)
build=${PM_BUILD_DIR:-.}
man3=$top_srcdir/doc/man3
cc=${PM_CC:-${CC:-cc}}
status=0

fail() {
    echo "FAIL: $*" >&2
    status=1
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/man-check.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' HUP INT TERM

# --- the exported symbols -----------------------------------------------
lib=$build/.libs/libprocmesh.so
if [ -f "$lib" ]; then
    nm -D --defined-only "$lib" >"$tmp/nm" || { echo "FAIL: nm -D $lib failed" >&2; exit 1; }
elif [ -f "$build/.libs/libprocmesh.a" ]; then
    # --disable-shared: the archive's global symbols; pm__ internals are
    # global there too, so only the single-underscore names are public.
    lib=$build/.libs/libprocmesh.a
    nm -g --defined-only "$lib" >"$tmp/nm" || { echo "FAIL: nm $lib failed" >&2; exit 1; }
else
    echo "FAIL: no libprocmesh.so or .a under $build/.libs (build first, or set PM_BUILD_DIR)" >&2
    exit 1
fi
awk 'NF >= 3 { sub(/@.*/, "", $3); print $3 }' "$tmp/nm" | grep -E '^pm_[a-z0-9]' | sort -u >"$tmp/syms"
nsyms=$(wc -l <"$tmp/syms")
[ "$nsyms" -gt 0 ] || { echo "FAIL: $lib exports no pm_ symbol" >&2; exit 1; }

# --- roff to text ---------------------------------------------------------
# extract SECTION FILE: the lines of the .nf/.fi and .EX/.EE blocks under
# .SH SECTION, as C: font macros (.B .I .BI .BR ...) become their arguments
# (joined by spaces for .B/.I, run together for the alternating ones), other
# requests become blank lines, a blank line separates blocks (-v sep=1 writes
# "@@" between them), and the usual escapes are undone.
extract() {
    awk -v want="$1" -v sep="${2:-0}" '
    function args(s,    out, n, i, c, q, cur, have) {
        n = 0; cur = ""; q = 0; have = 0
        for (i = 1; i <= length(s); i++) {
            c = substr(s, i, 1)
            if (q) {
                if (c == "\"") { q = 0 } else { cur = cur c }
            } else if (c == "\"") {
                q = 1; have = 1
            } else if (c == " " || c == "\t") {
                if (have || cur != "") { A[++n] = cur; cur = ""; have = 0 }
            } else {
                cur = cur c
            }
        }
        if (have || cur != "") A[++n] = cur
        return n
    }
    /^\.SH/ {
        t = $0; sub(/^\.SH[ \t]*/, "", t); gsub(/"/, "", t)
        insec = (t == want); inblk = 0; next
    }
    !insec { next }
    /^\.(nf|EX)([ \t]|$)/ { inblk = 1; if (sep && nblk++) print "@@"; next }
    /^\.(fi|EE)([ \t]|$)/ { inblk = 0; next }
    !inblk { next }
    /^\.\\"/ { next }
    /^[.\047]/ {
        m = $0; sub(/^[.\047][ \t]*/, "", m)
        name = m; sub(/[ \t].*$/, "", name)
        rest = m; sub(/^[^ \t]*[ \t]*/, "", rest)
        if (name ~ /^(B|I|R|SM|SB)$/) {
            n = args(rest); out = ""
            for (i = 1; i <= n; i++) out = out (i > 1 ? " " : "") A[i]
            print out
        } else if (name ~ /^(BI|IB|BR|RB|IR|RI)$/) {
            n = args(rest); out = ""
            for (i = 1; i <= n; i++) out = out A[i]
            print out
        } else {
            print ""
        }
        next
    }
    { print }
    ' "$3" | sed -e 's/\\e/\x01/g' \
        -e 's/\\f\[[^]]*\]//g' -e 's/\\f(..//g' -e 's/\\f.//g' \
        -e 's/\\-/-/g' -e 's/\\(aq/'"'"'/g' -e 's/\\(dq/"/g' -e 's/\\(ti/~/g' \
        -e 's/\\(ha/^/g' -e 's/\\&//g' -e 's/\\[|^]//g' -e 's/\\ / /g' \
        -e 's/\x01/\\/g'
}

# The text of .SH NAME before "\-": the names a page documents.
names_of() {
    awk '/^\.SH/ { t = $0; sub(/^\.SH[ \t]*/, "", t); gsub(/"/, "", t); insec = (t == "NAME"); next }
         insec && !/^[.\047]/ { print }' "$1" |
        sed 's/\\-.*//' | tr ',' '\n' | tr -d ' \t' | grep -v '^$' || true
}

# Shell builtins only: these run for every page and every symbol, and a
# fork per call made this script take 20 s of the suite.
is_stub() {
    first=
    IFS= read -r first <"$1" || true
    case $first in .so\ man3/*) return 0 ;; esac
    return 1
}

compile() { # what file.c
    if ! $cc -std=c11 -Wall -Wextra -Werror -fsyntax-only -I"$top_srcdir/include" "$2" \
        >"$tmp/cc.out" 2>&1; then
        fail "$1 does not compile with $cc:"
        sed 's/^/    /' "$tmp/cc.out" >&2
        return 1
    fi
}

[ -d "$man3" ] || { echo "FAIL: no directory $man3" >&2; exit 1; }

# --- 1. a page for every symbol ---------------------------------------------
while read -r sym; do
    page=$man3/$sym.3
    if [ ! -f "$page" ]; then
        fail "$sym is exported but has no man page: add doc/man3/$sym.3 (a page, or '.so man3/<group>.3')"
        continue
    fi
    group=$page
    if is_stub "$page"; then
        lines=0
        while IFS= read -r l || [ -n "$l" ]; do lines=$((lines + 1)); done <"$page"
        if [ "$lines" -ne 1 ]; then
            fail "doc/man3/$sym.3: a .so stub must be that one line"
        fi
        IFS= read -r target <"$page" || true
        target=${target#.so man3/}
        group=$man3/$target
        if [ ! -f "$group" ] || is_stub "$group"; then
            fail "doc/man3/$sym.3 points at man3/$target, which is not a page"
            continue
        fi
    fi
    g=${group##*/}
    # A group page documents many symbols: its names and SYNOPSIS are
    # extracted once.
    if [ ! -f "$tmp/names.$g" ]; then
        names_of "$group" >"$tmp/names.$g"
        extract SYNOPSIS 0 "$group" >"$tmp/syn.$g"
    fi
    if ! grep -qx "$sym" "$tmp/names.$g"; then
        fail "$sym is not listed in the NAME section of doc/man3/$g"
    fi
    if ! grep -Eq "[^A-Za-z0-9_]$sym[[:space:]]*\(" "$tmp/syn.$g"; then
        fail "$sym is not declared in the SYNOPSIS of doc/man3/$g"
    fi
done <"$tmp/syms"

# --- 2. nothing stale, everything installed --------------------------------------
pages=0
for page in "$man3"/*.3; do
    [ -f "$page" ] || continue
    f=${page##*/}
    if ! grep -Eq "(^|[[:space:]])doc/man3/$f([[:space:]\\\\]|\$)" "$top_srcdir/Makefile.am"; then
        fail "doc/man3/$f is not listed in Makefile.am (it would not be installed)"
    fi
    if is_stub "$page"; then
        grep -qx "${f%.3}" "$tmp/syms" || fail "doc/man3/$f: ${f%.3} is not exported by $lib (stale page?)"
        continue
    fi
    pages=$((pages + 1))
    for n in $(names_of "$page"); do
        grep -qx "$n" "$tmp/syms" || fail "doc/man3/$f documents $n, which $lib does not export"
    done
    for s in NAME SYNOPSIS DESCRIPTION "RETURN VALUE" EXAMPLES "SEE ALSO"; do
        grep -Eq "^\.SH \"?$s\"?\$" "$page" || fail "doc/man3/$f has no $s section"
    done

    # --- 3. the SYNOPSIS and the EXAMPLES compile ----------------------------
    { echo '#include <procmesh.h>'; extract SYNOPSIS 0 "$page"; } >"$tmp/syn.c"
    compile "the SYNOPSIS of doc/man3/$f" "$tmp/syn.c" || true
    extract EXAMPLES 1 "$page" | awk -v dir="$tmp" '
        BEGIN { n = 1; f = dir "/ex1.c" }
        /^@@$/ { close(f); n++; f = dir "/ex" n ".c"; next }
        { print > f }' 
    for ex in "$tmp"/ex*.c; do
        [ -f "$ex" ] || continue
        compile "the EXAMPLES ($(basename "$ex" .c)) of doc/man3/$f" "$ex" || true
        rm -f "$ex"
    done
done
[ "$pages" -gt 0 ] || fail "no man page in $man3"

# --- 5. every public struct field and enum value is in the pages ----------------
# The header, comments stripped, read by a small parser of its own layout:
# "typedef struct NAME {" / "struct NAME {" / "enum NAME {" at the start of
# a line, one declaration (or several declarators) per line, "}" closing.
fields_of() {
    awk '
    # Prints "struct NAME FIELD" and "enum NAME VALUE" for every public struct
    # field and enum value of a C header (comments stripped first).
{
    line = $0
    # comments stripped, also across lines
    while (1) {
        if (incom) {
            e = index(line, "*/")
            if (e == 0) { line = ""; break }
            line = substr(line, e + 2); incom = 0
        }
        s = index(line, "/*")
        if (s == 0) break
        rest = substr(line, s + 2)
        e = index(rest, "*/")
        if (e == 0) { line = substr(line, 1, s - 1); incom = 1; break }
        line = substr(line, 1, s - 1) " " substr(rest, e + 2)
    }
    if (line ~ /^(typedef )?struct [a-z_]+ \{/) { kind = "struct"; name = line; sub(/^(typedef )?struct /, "", name); sub(/ .*/, "", name); depth = 1; next }
    if (line ~ /^enum [a-z_]+ \{/) { kind = "enum"; name = line; sub(/^enum /, "", name); sub(/ .*/, "", name); depth = 1
        rest = line; sub(/^[^{]*\{/, "", rest); line = rest }
    if (kind == "") next
    if (line ~ /^\}/) { kind = ""; next }
    if (kind == "enum") {
        n = split(line, parts, ",")
        for (i = 1; i <= n; i++) { v = parts[i]; gsub(/[ \t}].*$|=.*$/, "", v); sub(/^[ \t]+/, "", v); p = parts[i]; sub(/^[ \t]+/, "", p); sub(/[ \t=}].*$/, "", p); if (p ~ /^PM_[A-Z0-9_]+$/ && p !~ /__COUNT$/) print "enum " name " " p }
        if (line ~ /\}/) kind = ""
        next
    }
    # struct field: declarators before the semicolon
    if (line !~ /;/) next
    decl = line; sub(/;.*/, "", decl)
    # function pointer field: (*name)
    if (decl ~ /\(\*[a-z_0-9]+\)/) { f = decl; sub(/^[^(]*\(\*/, "", f); sub(/\).*/, "", f); print "struct " name " " f; next }
    n = split(decl, ds, ",")
    for (i = 1; i <= n; i++) {
        d = ds[i]; sub(/\[.*$/, "", d); gsub(/[ \t*]+$/, "", d)
        m = split(d, w, /[ \t*]+/)
        if (m >= 1 && w[m] ~ /^[a-z_][a-z0-9_]*$/) print "struct " name " " w[m]
    }
}
    ' "$1"
}
fields_of "$top_srcdir/include/procmesh.h" >"$tmp/fields"
[ -s "$tmp/fields" ] || fail "found no struct field or enum value in include/procmesh.h (the parser of man-check.sh no longer fits the header)"
# A field is documented where its struct is: some page that names the
# struct's type (as a word) must list the field in a form a field listing
# uses, not merely contain the word (worker, signal, ended are common
# words). Listed: a declaration in a .nf/.EX block ("type name;",
# "name[N];", "(*name)(", "name," of several declarators; inside a
# "struct NAME {" listing, for that struct only), an argument of a
# font macro line (.B name, .IR name ...), or an inline \fBname\fR /
# \fIname\fP. An enum value likewise, in some page naming its enum's type,
# or, when no page names that type, in any page (an enum is often met
# through its values alone), and in a block also as "NAME =".
listed() {
    sed -e 's/\\-/-/g' "$1" | awk '
    /^\.(nf|EX)/ { block = 1; next }
    /^\.(fi|EE)/ { block = 0; cur = ""; next }
    /^\.(B|I|BR|IR|RB|RI|BI|IB)([ \t]|$)/ {
        line = $0; sub(/^\.[A-Z]+/, "", line); gsub(/"/, " ", line)
        n = split(line, w, /[ \t]+/)
        for (i = 1; i <= n; i++) if (w[i] ~ /^[A-Za-z_][A-Za-z0-9_]*$/) print w[i]
    }
    {
        line = $0
        while (match(line, /\\f[BI][A-Za-z_][A-Za-z0-9_]*\\f[RP]/)) {
            t = substr(line, RSTART + 3, RLENGTH - 6); print t
            line = substr(line, RSTART + RLENGTH)
        }
        if (!block) next
        # A declaration in a struct listing counts for that struct only
        # ("NAME.field"): the signal field of pm_event lists no other struct field.
        if ($0 ~ /^[ \t]*(typedef )?struct [a-z_]+ \{/) {
            cur = $0; sub(/^[ \t]*(typedef )?struct /, "", cur); sub(/ .*/, "", cur)
            print cur ".{"; next
        }
        if ($0 ~ /^[ \t]*\}/) cur = ""
        pre = cur != "" ? cur "." : ""
        line = $0
        while (match(line, /\(\*[A-Za-z_][A-Za-z0-9_]*\)/)) {
            print pre substr(line, RSTART + 2, RLENGTH - 3); line = substr(line, RSTART + RLENGTH)
        }
        line = $0; sub(/\/\*.*/, "", line)
        while (match(line, /[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])*[ \t]*[;,=]/)) {
            t = substr(line, RSTART, RLENGTH); sub(/[^A-Za-z0-9_].*/, "", t)
            if (substr(line, RSTART + RLENGTH - 1, 1) != "=" || t ~ /^PM_/) print pre t
            line = substr(line, RSTART + RLENGTH)
        }
    }' | sort -u
}
# "page name" for every name a page lists; "type page" for every page that
# names a struct's or enum's type; then one pass over the fields.
: >"$tmp/listed"
: >"$tmp/texts"
for page in "$man3"/*.3; do
    is_stub "$page" && continue
    base=${page##*/}
    listed "$page" | sed "s/^/$base /" >>"$tmp/listed"
    sed -e 's/\\f.//g' -e 's/\\-/-/g' "$page" | tr -cs 'A-Za-z0-9_' '\n' | sort -u |
        sed "s/^/$base /" >>"$tmp/texts"
done
nfields=$(wc -l <"$tmp/fields")
awk '
FILENAME == ARGV[1] { lst[$1 " " $2] = 1; pages[$1] = 1; next }
FILENAME == ARGV[2] { named[$2] = named[$2] " " $1; next }
{
    kind = $1; name = $2; item = $3; o = named[name]
    if (o == "") {
        if (kind == "struct") { print "struct " name " (include/procmesh.h) is named in no page of doc/man3"; next }
        for (p in pages) o = o " " p
    }
    k = split(o, ps, " ")
    # A struct some page lists as a declaration must have every field in
    # such a listing: a listing that leaves fields out says they are not
    # there. Otherwise the fields may be named in the text.
    listing = 0
    for (i = 1; i <= k; i++) if ((ps[i] " " name ".{") in lst) listing = 1
    for (i = 1; i <= k; i++)
        if ((!listing && (ps[i] " " item) in lst) || (ps[i] " " name "." item) in lst) next
    if (listing)
        print kind " " name ": " item " (include/procmesh.h) is missing from the struct listing (struct " name " { ... }) of:" named[name]
    else
        print kind " " name ": " item " (include/procmesh.h) is not listed (a .B/.I line, an inline font change, a declaration in a block) in a page naming " name ":" named[name]
}' "$tmp/listed" "$tmp/texts" "$tmp/fields" >"$tmp/unlisted"
while read -r line; do
    fail "$line"
done <"$tmp/unlisted"

# --- 4. groff finds nothing to warn about ---------------------------------------
formatted="format cleanly"
if command -v groff >/dev/null 2>&1; then
    for page in "$man3"/*.3 "$top_srcdir"/doc/*.[1-8]; do
        [ -f "$page" ] || continue
        is_stub "$page" && continue
        if ! groff -man -ww -z -Tutf8 "$page" >"$tmp/groff.out" 2>&1 || [ -s "$tmp/groff.out" ]; then
            fail "groff -man -ww warns about ${page#"$top_srcdir"/}:"
            sed 's/^/    /' "$tmp/groff.out" >&2
        fi
    done
else
    echo "SKIP: groff is not installed; the pages were not checked for roff warnings"
    formatted="were not formatted (no groff)"
fi

[ "$status" -eq 0 ] && echo "man-check: $nsyms exported functions, each with a page; $pages group pages compile and $formatted; $nfields struct fields and enum values named"
exit "$status"
