#!/usr/bin/env bash
# A/B benchmark: one benchmark script at an earlier commit and at the working tree, run
# alternately in one session (these machines are noisy: only interleaved runs compare).
#
#   benchmarks/ab.sh BEFORE ROUNDS SCRIPT [ARGS...]
#   benchmarks/ab.sh f7dabf4 3 bench_cpu.py --repeat 5
#
# Each side runs its own commit's copy of SCRIPT against its own src/ (PYTHONPATH), with
# the same interpreter ($PYTHON, default .venv/bin/python). Output: one log per run under
# $AB_OUT (default a temporary folder), "before-<round>.log" and "after-<round>.log"; the
# order within a round alternates so neither side always runs first.
set -euo pipefail
[[ $# -ge 3 ]] || { sed -n 2,10p "$0"; exit 2; }
before=$1 rounds=$2 script=$3
shift 3
root=$(git rev-parse --show-toplevel)
py=${PYTHON:-$root/.venv/bin/python}
out=${AB_OUT:-$(mktemp -d)}
wt=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$wt" >/dev/null 2>&1 || true' EXIT
git -C "$root" worktree add --detach -q "$wt" "$before"
mkdir -p "$out"
echo "A/B $script $*: before $(git -C "$wt" rev-parse --short HEAD), after $(git -C "$root" rev-parse --short HEAD)$(
    git -C "$root" diff --quiet HEAD || echo '+changes'); logs in $out"

run() {  # side round ARGS...
    local side=$1 round=$2 dir=$root
    shift 2
    [[ $side == before ]] && dir=$wt
    echo "== $side round $round (load $(cut -d' ' -f1-3 /proc/loadavg))"
    (cd "$dir" && PYTHONPATH="$dir/src" "$py" "benchmarks/$script" "$@") >"$out/$side-$round.log" 2>&1 \
        || { echo "   failed: see $out/$side-$round.log"; return 1; }
    tail -n "${AB_TAIL:-6}" "$out/$side-$round.log" | sed 's/^/   /'
}
for ((r = 1; r <= rounds; r++)); do
    if ((r % 2)); then run before "$r" "$@"; run after "$r" "$@"
    else run after "$r" "$@"; run before "$r" "$@"; fi
done
