#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# run.sh - mutation testing: applies each mutant (tests/mutants/*.mut) to a
# scratch copy of the source tree, rebuilds, runs the tests that must catch
# it, and reports caught / survived / broken / stale (tests/mutants/README.md).
#
# Usage: run.sh [--srcdir DIR] [--work DIR] [--ci] [--trees N] [--no-baseline] [--fresh] [--list] [MUTANT...]
#   MUTANT      a mutant's name (its file name without .mut) or path; default all
#   --ci        only the mutants marked `ci: yes` (the CI subset)
#   --no-baseline  do not first run every selected test unmutated (by
#               default each must pass there, or the run stops: a test that
#               fails anyway would make every mutant look caught; a
#               baseline that fails is run once more, and stops the run
#               only if it fails again)
#   --trees N   N scratch trees judge the mutants in parallel (default
#               $MUTANTS_TREES or 1): WORK and WORK/tree1 ...; most of a
#               mutant's time is its tests waiting on processes, not CPU
#   --fresh     copy, configure and build the scratch trees anew (by default
#               an earlier run's trees are updated by content and reused)
#   --list      print the selected mutants and their rules, build nothing
# Environment: MUTANTS_JOBS (make -j, default 2, shared by the trees), MUTANT_TIMEOUT (seconds per
# test program run, default 300), MUTANTS_CONFIGURE (configure flags).
# Exit: 0 every mutant caught; 1 one survived, broke or is stale; 2 usage or
# setup error.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
srcdir=$(cd "$here/../.." && pwd)
work=""
ci=0
fresh=0
baseline=1
list=0
trees=${MUTANTS_TREES:-1}
names=()
while [ $# -gt 0 ]; do
    case "$1" in
    --srcdir) srcdir=$(cd "$2" && pwd) || exit 2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --ci) ci=1; shift ;;
    --trees) trees=$2; shift 2 ;;
    --baseline) baseline=1; shift ;; # the default; kept for old command lines
    --no-baseline) baseline=0; shift ;;
    --fresh) fresh=1; shift ;;
    --list) list=1; shift ;;
    -h | --help) awk 'NR > 2 && /^#/ { sub(/^# ?/, ""); print; next } NR > 2 { exit }' "$0"; exit 0 ;;
    -*) echo "run.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) names+=("$1"); shift ;;
    esac
done
jobs=${MUTANTS_JOBS:-2}
case $trees in '' | *[!0-9]* | 0) echo "run.sh: --trees wants a positive number, not '$trees'" >&2; exit 2 ;; esac
tmo=${MUTANT_TIMEOUT:-300}
mutdir="$srcdir/tests/mutants"
die() { echo "run.sh: $*" >&2; exit 2; }

# --- the mutants ---------------------------------------------------------
files=()
if [ ${#names[@]} -eq 0 ]; then
    for f in "$mutdir"/*.mut; do files+=("$f"); done
else
    for n in "${names[@]}"; do
        if [ -f "$n" ]; then files+=("$(cd "$(dirname "$n")" && pwd)/$(basename "$n")")
        elif [ -f "$mutdir/$n.mut" ]; then files+=("$mutdir/$n.mut")
        else die "no mutant '$n' (looked for $mutdir/$n.mut)"; fi
    done
fi
[ ${#files[@]} -gt 0 ] || die "no mutants in $mutdir"

# field FILE KEY: the values of `KEY: value` lines in the header (before
# `--- find`), one per line.
field() {
    awk -v k="$2" '/^--- /{exit} index($0, k ": ") == 1 { print substr($0, length(k) + 3) }' "$1"
}

# Checks a mutant file's form; prints what is wrong, returns 1 if anything.
check_form() {
    local f=$1 ok=0
    [ -n "$(field "$f" rule)" ] || { echo "$f: no 'rule:' line"; ok=1; }
    [ "$(field "$f" file | wc -l)" -eq 1 ] || { echo "$f: needs exactly one 'file:' line"; ok=1; }
    [ -n "$(field "$f" test)" ] || { echo "$f: no 'test:' line"; ok=1; }
    grep -qx -- '--- find' "$f" || { echo "$f: no '--- find' section"; ok=1; }
    grep -qx -- '--- replace' "$f" || { echo "$f: no '--- replace' section"; ok=1; }
    grep -qx -- '--- end' "$f" || { echo "$f: no '--- end' line"; ok=1; }
    local t
    while read -r t; do
        local prog=${t%% *} c
        [ -f "$srcdir/tests/$prog.c" ] || { echo "$f: test program tests/$prog.c does not exist"; ok=1; continue; }
        # A case is what CK_RUN_CASE selects: a TCase's name.
        for c in ${t#"$prog"}; do
            grep -qE "(PM_ADD_(LOOP_)?TEST\([a-z_]+, |pm_tcase\(\"|tcase_create\(\")$c[,\"]" "$srcdir/tests/$prog.c" ||
                { echo "$f: tests/$prog.c has no test case (TCase) named '$c'"; ok=1; }
        done
    done < <(field "$f" test)
    return $ok
}

sel=()
bad=0
for f in "${files[@]}"; do
    check_form "$f" || { bad=1; continue; }
    if [ $ci -eq 1 ] && [ "$(field "$f" ci)" != yes ]; then continue; fi
    sel+=("$f")
done
[ $bad -eq 0 ] || die "malformed mutant file(s), see above"
[ ${#sel[@]} -gt 0 ] || die "no mutant selected"

if [ $list -eq 1 ]; then
    for f in "${sel[@]}"; do
        printf '%-28s %-20s %s\n' "$(basename "$f" .mut)" "$(field "$f" file)" "$(field "$f" rule)"
    done
    exit 0
fi

# --- the scratch trees ---------------------------------------------------
# Tree 0 is WORK itself (WORK/src, WORK/build), tree N is WORK/treeN: the
# names auto.py --tree reuses (make mutants-auto-ci).
[ -n "$work" ] || work="$PWD/mutants-work"
mkdir -p "$work" || die "cannot create $work"
work=$(cd "$work" && pwd)
[ ! -e "$srcdir/config.status" ] ||
    die "$srcdir is configured in tree; mutants need a clean source tree (build out of tree)"
start=$(date +%s)
[ "$trees" -le ${#sel[@]} ] || trees=${#sel[@]}
# The trees build at once: make -j is shared between them.
mjobs=$((jobs / trees))
[ "$mjobs" -ge 1 ] || mjobs=1
echo "mutants: ${#sel[@]} selected; scratch tree(s) $work ($trees)"
# The source tree as it is (uncommitted edits included), without build
# directories, git metadata or the scratch directory.
copy_tree() {
    (cd "$srcdir" && tar -cf - --exclude=./.git --exclude='./_build*' --exclude=./autom4te.cache \
        --exclude=./fuzz-out --exclude="./${work#"$srcdir"/}" .) | (cd "$1" && tar -xf -) ||
        die "copying $srcdir failed"
}
tree_dir() { if [ "$1" -eq 0 ]; then echo "$work"; else echo "$work/tree$1"; fi; }

# What every mutant's build needs besides its own test programs: the workers
# and the daemon the tests start.
helpers="tests/pm-test-worker tests/pm-raw-worker tests/pm-notify-send src/daemon/procmesh"
progs_of() { field "$1" test | awk '{ print "tests/" $1 }' | sort -u | tr '\n' ' '; }
allprogs=$(for f in "${sel[@]}"; do progs_of "$f"; done | tr ' ' '\n' | sort -u | tr '\n' ' ')

# Brings scratch tree $2 (tree number $1) up to date and builds it.
setup_tree() {
    local n=$1 tw=$2 log="$2/setup.log" t0
    t0=$(date +%s)
    mkdir -p "$tw" || die "cannot create $tw"
    rm -rf "$tw/new" "$tw/applied"
    if [ $fresh -eq 0 ] && [ -f "$tw/build/config.status" ] && [ -f "$tw/src/.mutants-clean" ]; then
        # A scratch tree from an earlier run, every mutant reverted: bring it up
        # to date by content. A changed file is copied with a new mtime, so make
        # rebuilds what depends on it (tar's preserved mtimes could be older
        # than objects built from a mutant).
        echo "mutants: reusing the scratch build in $tw (--fresh to start over)"
        mkdir -p "$tw/new"
        copy_tree "$tw/new"
        (cd "$tw/new" && find . -type f) | while IFS= read -r p; do
            cmp -s "$tw/new/$p" "$tw/src/$p" ||
                { mkdir -p "$tw/src/$(dirname "$p")" && cp "$tw/new/$p" "$tw/src/$p"; }
        done
        rm -rf "$tw/new"
        : >"$log"
    else
        rm -rf "$tw/src" "$tw/build"
        mkdir -p "$tw/src" "$tw/build"
        copy_tree "$tw/src"
        : >"$log"
        if [ ! -x "$tw/src/configure" ]; then
            (cd "$tw/src" && ./autogen.sh) >>"$log" 2>&1 || { tail -20 "$log"; die "autogen.sh failed ($log)"; }
        fi
        # Configure's answers are the same for every tree: tree 0 keeps them
        # in WORK/config.cache, the others wait for it and start from a copy
        # instead of asking again (most of a configure's time).
        if [ "$n" -gt 0 ]; then
            while [ ! -e "$work/configured" ]; do
                [ ! -e "$work/ready.failed" ] || die "tree 0 could not be set up"
                sleep 1
            done
            [ ! -f "$work/config.cache" ] || cp "$work/config.cache" "$tw/config.cache"
        fi
        # --disable-static: the programs link libpmcore's PIC objects (a
        # convenience library beside the shared libprocmesh), so the non-PIC
        # copy of every object, for a static libprocmesh.a no test uses,
        # would only double each compile.
        # shellcheck disable=SC2086 # MUTANTS_CONFIGURE is a list of flags
        (cd "$tw/build" && "$tw/src/configure" --disable-static --cache-file="$tw/config.cache" \
            ${MUTANTS_CONFIGURE:-}) >>"$log" 2>&1 ||
            { tail -20 "$log"; die "configure failed ($log)"; }
    fi
    [ "$n" -ne 0 ] || touch "$work/configured"
    # Removed while a mutant is applied: a run that is interrupted then leaves
    # a tree the next run does not reuse.
    touch "$tw/src/.mutants-clean"
    # shellcheck disable=SC2086
    nice make -C "$tw/build" -j"$mjobs" $helpers $allprogs >>"$log" 2>&1 ||
        { tail -30 "$log"; die "the unmutated tree $tw does not build ($log)"; }
    echo "mutants: scratch tree $tw built in $(($(date +%s) - t0)) s"
}

# Runs the test lines of mutant file $1 in the tree $3; output in $2. 0 all
# passed, 1 one failed, crashed or timed out, 77 one was skipped (and none
# failed).
run_tests() {
    local f=$1 out=$2 tw=$3 t rc=0 r
    while read -r t; do
        local prog=${t%% *} c cases
        # shellcheck disable=SC2206 # the case names are words
        cases=(${t#"$prog"})
        [ ${#cases[@]} -gt 0 ] || cases=("") # no case named: the whole program
        for c in "${cases[@]}"; do
            echo "== tests/$prog ${c:+CK_RUN_CASE=$c}" >>"$out"
            (cd "$tw/build" && env CK_FORK=yes CK_VERBOSITY=normal PM_TEST_RUN="$tw/build" \
                ${c:+CK_RUN_CASE="$c"} timeout -k 10 "$tmo" nice "./tests/$prog") >>"$out" 2>&1
            r=$?
            echo "== exit $r" >>"$out"
            # Check runs nothing for a CK_RUN_CASE it does not know.
            if [ $r -eq 0 ] && tail -3 "$out" | grep -q 'Checks: 0,'; then
                echo "== no test ran: is '$c' a test case of tests/$prog?" >>"$out"
                return 3
            fi
            if [ $r -eq 126 ] || [ $r -eq 127 ]; then
                echo "== tests/$prog could not be run" >>"$out"
                return 4
            elif [ $r -eq 77 ]; then
                [ $rc -ne 0 ] || rc=77
            elif [ $r -ne 0 ]; then
                return 1 # caught: no need to run the rest
            fi
        done
    done < <(field "$f" test)
    return $rc
}

# The baseline: every test line the selected mutants name, each once, on
# the unmutated tree $1. One that fails (or skips) here would make every
# mutant it is named for look caught (or survive), so the run refuses to
# go on.
baseline() {
    local tw=$1 b0 r
    b0=$(date +%s)
    { for f in "${sel[@]}"; do field "$f" test; done | sort -u | sed 's/^/test: /'; } >"$work/baseline.mut"
    echo "mutants: baseline: $(grep -c . "$work/baseline.mut") test line(s), unmutated"
    : >"$work/baseline.out"
    run_tests "$work/baseline.mut" "$work/baseline.out" "$tw"
    r=$?
    if [ $r -ne 0 ]; then
        # Once may be a flaky test (under load, say), not a broken one: it
        # can only make a mutant look caught. Twice in a row stops the run.
        echo "mutants: the baseline failed once (exit $r; $work/baseline.out), again:"
        echo "== the baseline again" >>"$work/baseline.out"
        run_tests "$work/baseline.mut" "$work/baseline.out" "$tw"
        r=$?
    fi
    if [ $r -ne 0 ]; then
        tail -30 "$work/baseline.out"
        die "a test fails or skips on the unmutated tree (exit $r, last '== tests/...' line above; $work/baseline.out): fix it before judging mutants"
    fi
    echo "mutants: baseline passed in $(($(date +%s) - b0)) s"
}

# --- each mutant ---------------------------------------------------------
# Applies mutant file $1 in the tree $2, judges and reverts it; its result
# line goes to WORK/NAME.result.
judge() {
    local f=$1 tw=$2 name target src out t0 status n secs line
    name=$(basename "$f" .mut)
    target=$(field "$f" file)
    src="$tw/src/$target"
    out="$work/$name.out"
    t0=$(date +%s)
    status=""
    if [ ! -f "$src" ]; then
        status="stale"
        echo "stale mutant $name: $target does not exist" >"$out"
    else
        # Apply: the find section must occur exactly once in the target.
        cp "$src" "$tw/orig"
        n=$(MUT="$f" OUT="$tw/applied" perl -0777 -e '
            open(my $m, "<", $ENV{MUT}) or die; local $/; my $t = <$m>;
            my ($find, $repl) = $t =~ /^--- find\n(.*?)^--- replace\n(.*?)^--- end$/ms or die "form";
            my $s = <STDIN>; my $n = () = $s =~ /\Q$find\E/g;
            if ($n == 1) { $s =~ s/\Q$find\E/$repl/; open(my $o, ">", $ENV{OUT}) or die; print $o $s; }
            print $n;' <"$src") || n=-1
        if [ "$n" != 1 ]; then
            status="stale"
            echo "stale mutant $name: its snippet occurs $n times in $target (must be exactly once)" >"$out"
        else
            rm -f "$tw/src/.mutants-clean"
            cat "$tw/applied" >"$src"
            # shellcheck disable=SC2086
            if ! nice make -C "$tw/build" -j"$mjobs" $helpers $(progs_of "$f") >"$out" 2>&1; then
                status="broken"
            else
                run_tests "$f" "$out" "$tw"
                case $? in
                1) status="caught" ;;
                3) status="stale (no test ran)" ;;
                4) status="error (not run)" ;;
                77) status="survived (skipped)" ;;
                *) status="survived" ;;
                esac
            fi
            # Revert: new content, new mtime, so the next build recompiles it.
            cat "$tw/orig" >"$src"
            touch "$tw/src/.mutants-clean"
        fi
        rm -f "$tw/applied"
    fi
    secs=$(($(date +%s) - t0))
    line=$(printf '%-30s %-18s %4d s' "$name" "$status" "$secs")
    echo "$line" >"$work/$name.result"
    # One write, so that the trees' lines do not mix.
    if [ "$status" = caught ] || [ "${status#survived}" != "$status" ]; then
        printf '%s  %s\n' "$line" "$(field "$f" rule)"
    else
        printf '%s  %s\n%s\n' "$line" "$(field "$f" rule)" "$(tail -15 "$out" | sed 's/^/    /')"
    fi
}

# One tree's share: set it up, then judge the mutants no tree has claimed
# yet (mkdir is the atomic claim), in their order. Tree 0 runs the baseline
# while the others build; they judge nothing before it passed.
tree_worker() {
    local n=$1 tw f
    tw=$(tree_dir "$n")
    if [ "$n" -eq 0 ]; then
        (setup_tree 0 "$tw" && if [ $baseline -eq 1 ]; then baseline "$tw"; fi) ||
            { touch "$work/ready.failed"; exit 2; }
        touch "$work/ready.ok"
    else
        setup_tree "$n" "$tw" || exit 2
        while [ ! -e "$work/ready.ok" ]; do
            [ ! -e "$work/ready.failed" ] || exit 0
            sleep 1
        done
    fi
    for f in "${sel[@]}"; do
        mkdir "$work/claims/$(basename "$f" .mut)" 2>/dev/null || continue
        judge "$f" "$tw"
    done
}

rm -rf "$work/claims" "$work/configured" "$work/ready.ok" "$work/ready.failed" "$work"/*.result
mkdir -p "$work/claims"
pids=()
for ((n = 0; n < trees; n++)); do
    tree_worker "$n" &
    pids+=($!)
done
setup_failed=0
for p in "${pids[@]}"; do wait "$p" || setup_failed=1; done
[ $setup_failed -eq 0 ] || die "a scratch tree could not be set up or its baseline failed (see above)"

results=()
failed=0
for f in "${sel[@]}"; do
    name=$(basename "$f" .mut)
    [ -f "$work/$name.result" ] || die "no result for mutant $name"
    r=$(cat "$work/$name.result")
    results+=("$r")
    case $r in *" caught "*) ;; *) failed=1 ;; esac
done

total=$(($(date +%s) - start))
echo
echo "mutants: summary ($total s in all; logs in $work/<name>.out)"
printf '%s\n' "${results[@]}" | tee "$work/results.txt"
caught=$(printf '%s\n' "${results[@]}" | grep -c ' caught ')
echo "mutants: $caught of ${#results[@]} caught in $total s"
exit $failed
