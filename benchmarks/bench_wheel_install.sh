#!/usr/bin/env bash
# First read after a plain `pip install` of the wheel (issue 24): builds the wheel (the
# build compiles the kernels into it, see setup.py), installs it into a fresh venv, makes
# the venv read-only (the reads run as nobody when run as root), then times fresh processes, interleaved round by round, each with an
# empty HOME and no NUMBA_CACHE_DIR: the `gtsamples read` command on a 20,000-row artifact
# (to Parquet), and pyarrow's read of the same rows from Parquet (import + read_table).
# Prints each run's wall time and the files it left in its home: a kernel compiled by a
# read-only install is saved in the user's cache (~/.cache/gtsamples), so 0 files means
# that the read compiled nothing.
#
#   benchmarks/bench_wheel_install.sh [ROUNDS] [WHEEL]   (default 3; builds the wheel
#   with `pip wheel .` when WHEEL is not given)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
d=$(mktemp -d)
trap 'chmod -R u+w "$d"; rm -rf "$d"' EXIT
wheel=${2:-}
if [[ -z $wheel ]]; then
    python3 -m pip wheel -q --no-deps . -w "$d/dist"
    wheel=$(ls "$d"/dist/gtsamples-*.whl)
fi
python3 -m venv "$d/venv"
"$d/venv/bin/pip" install -q "$wheel" 2>"$d/pip.log" || { cat "$d/pip.log"; exit 1; }
# read-only; as nobody when run as root (root writes through chmod)
chmod -R a-w,a+rX "$d/venv"; chmod 755 "$d"; mkdir -m 777 "$d/data" "$d/setup-home"
as=()
[[ $(id -u) == 0 ]] && as=(setpriv --reuid=65534 --regid=65534 --clear-groups)
echo "compiled kernel files in the installed package: $(find "$d"/venv/lib/*/site-packages/gtsamples -name '*.nb[ic]' | wc -l)"
# the artifact and its Parquet copy, written by the venv itself (what this compiles goes to a
# home thrown away)
env -u NUMBA_CACHE_DIR -u GTSAMPLES_CACHE_DIR -u XDG_CACHE_HOME HOME="$d/setup-home" "${as[@]}" \
    "$d/venv/bin/python" - "$d/data" <<'PYEOF'
import sys, uuid, pyarrow.parquet as pq, gtsamples as gs
from gtsamples.demo import synthetic_metrics
t = synthetic_metrics(20, 1000)
e = gs.write_artifact(t, sys.argv[1] + "/art", region_id=1, source_file_id=str(uuid.uuid4()),
                      timestamp_column_id=0, field_column_ids=[1, 2, 3, 4])
open(sys.argv[1] + "/gen", "w").write(sys.argv[1] + "/art/" + e.objects[0].path.rsplit("/", 1)[0])
pq.write_table(t, sys.argv[1] + "/t.parquet", compression="zstd")
PYEOF
gen=$(cat "$d/data/gen")
for r in $(seq "$rounds"); do
    for what in gtsamples pyarrow; do
        h="$d/home-$r-$what"; mkdir -m 777 "$h"
        t0=$(date +%s.%N)
        if [[ $what == gtsamples ]]; then
            out=$(env -u NUMBA_CACHE_DIR -u GTSAMPLES_CACHE_DIR -u XDG_CACHE_HOME HOME="$h" "${as[@]}" \
                  "$d/venv/bin/gtsamples" read "$gen" -o "$h/out.parquet" --no-progress 2>&1 | tail -n 1)
        else
            out=$(env HOME="$h" "${as[@]}" "$d/venv/bin/python" -c "import pyarrow.parquet as pq; pq.read_table('$d/data/t.parquet')")
        fi
        t1=$(date +%s.%N)
        printf 'round %s %-9s %6.2f s  files in its home: %s  %s\n' "$r" "$what" "$(echo "$t1 - $t0" | bc)" \
            "$(find "$h" -type f ! -name out.parquet | wc -l)" "$out"
    done
done
