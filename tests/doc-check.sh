#!/bin/sh
# SPDX-License-Identifier: MIT
# doc-check.sh - doc/design.md's module table matches src/, and sources cite
# only what is in the repository.
#
# 1. Every src/**/*.c and *.h is named in a row of design.md's module table
#    (a table line starting with "| `").
# 2. Every src/... path design.md names anywhere exists (a file or a folder).
# 3. Every "doc/reliability.md, fault N" (or "faults N and M") cited in
#    src/, tests/, fuzz/ or tools/ is a row of reliability.md's fault list,
#    and no file there cites a FAULTS.md (a file outside the repository).
# 4. Every test_* the fault list names is a test in tests/*.c.
# 5. Every hand-written mutant (tests/mutants/*.mut) still applies: its find
#    section occurs exactly once in its file (else make mutants calls it
#    stale, and CI fails only for the mutants it samples).
# Paths: the sources from this script's place. Exit: 0 all good, 1 a
# problem (each one named on stderr).
set -eu

top=$(cd "$(dirname "$0")/.." && pwd)
design=$top/doc/design.md
rel=$top/doc/reliability.md
status=0
tmp=${TMPDIR:-/tmp}/doc-check.$$
trap 'rm -f "$tmp".*' EXIT

# 1. the table names every file
grep '^| `' "$design" | cut -d'|' -f2 | grep -o 'src/[A-Za-z0-9_./-]*' | sort -u >"$tmp.named"
(cd "$top" && find src -name '*.[ch]' | sort) >"$tmp.files"
for f in $(comm -23 "$tmp.files" "$tmp.named"); do
    echo "doc-check: $f has no row in doc/design.md's module table" >&2
    status=1
done

# 2. every path named exists
for p in $(grep -o 'src/[A-Za-z0-9_./-]*[A-Za-z0-9_/]' "$design" | sort -u); do
    if [ ! -e "$top/$p" ]; then
        echo "doc-check: doc/design.md names $p, which does not exist" >&2
        status=1
    fi
done

# 3. fault citations
sed -n 's/^| \([0-9][0-9]*\) | .*/\1/p' "$rel" | sort -u >"$tmp.rows"
(cd "$top" && grep -rhoE 'reliability\.md, faults? [0-9]+( and [0-9]+)?' src tests fuzz tools 2>/dev/null) |
    grep -oE '[0-9]+' | sort -u >"$tmp.cited" || true
for n in $(comm -23 "$tmp.cited" "$tmp.rows"); do
    echo "doc-check: a source cites doc/reliability.md, fault $n, which is not in its fault list" >&2
    status=1
done
if (cd "$top" && grep -rln --exclude=doc-check.sh 'FAULTS\.md\|FAULTS [0-9]' src tests fuzz tools 2>/dev/null); then
    echo "doc-check: the files above cite a FAULTS.md outside the repository (cite doc/reliability.md, fault N)" >&2
    status=1
fi

# 4. every test the fault list names exists
for t in $(sed -n '/^### Faults and what shows them/,/^## /p' "$rel" | grep -o '`test_[a-z0-9_]*`' | tr -d '`' | sort -u); do
    if ! grep -q "START_TEST($t)" "$top"/tests/*.c; then
        echo "doc-check: doc/reliability.md's fault list names $t, which no test program defines" >&2
        status=1
    fi
done

# 5. every hand-written mutant still applies (as tests/mutants/run.sh applies it)
for m in "$top"/tests/mutants/*.mut; do
    [ -f "$m" ] || continue
    target=$(sed -n 's/^file: *//p' "$m")
    n=$(MUT="$m" perl -0777 -e '
        open(my $m, "<", $ENV{MUT}) or die; local $/; my $t = <$m>;
        my ($find) = $t =~ /^--- find\n(.*?)^--- replace\n/ms or die "form";
        my $s = <STDIN>; my $n = () = $s =~ /\Q$find\E/g; print $n;' <"$top/$target" 2>/dev/null) || n=-1
    if [ "$n" != 1 ]; then
        echo "doc-check: tests/mutants/$(basename "$m"): its find section occurs $n times in $target (must be once)" >&2
        status=1
    fi
done

[ "$status" -eq 0 ] && echo "doc-check: the module table names every file under src/, every path it names exists, every fault cited is listed, every test it names exists, every hand-written mutant applies"
exit $status
