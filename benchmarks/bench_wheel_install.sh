#!/usr/bin/env bash
# First read after a plain `pip install` of the wheel (issue 24): builds the wheel (the
# build compiles the kernels into it, see setup.py), installs it into a fresh venv, makes
# the venv read-only, then times fresh processes, interleaved round by round, each with an
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
# the artifact and its Parquet copy, written by the venv itself (then thrown away with its home)
HOME="$d/setup-home" GTSAMPLES_CACHE_DIR="$d/setup-cache" "$d/venv/bin/python" - "$d" <<'PYEOF'
import sys, uuid, pyarrow.parquet as pq, gtsamples as gs
from gtsamples.demo import synthetic_metrics
t = synthetic_metrics(20, 1000)
e = gs.write_artifact(t, sys.argv[1] + "/art", region_id=1, source_file_id=str(uuid.uuid4()),
                      timestamp_column_id=0, field_column_ids=[1, 2, 3, 4])
open(sys.argv[1] + "/gen", "w").write(sys.argv[1] + "/art/" + e.objects[0].path.rsplit("/", 1)[0])
pq.write_table(t, sys.argv[1] + "/t.parquet", compression="zstd")
PYEOF
gen=$(cat "$d/gen")
chmod -R a-w "$d/venv"
for r in $(seq "$rounds"); do
    for what in gtsamples pyarrow; do
        h="$d/home-$r-$what"; mkdir "$h"; rm -rf "$d/out.parquet"
        t0=$(date +%s.%N)
        if [[ $what == gtsamples ]]; then
            out=$(env -u NUMBA_CACHE_DIR -u GTSAMPLES_CACHE_DIR -u XDG_CACHE_HOME HOME="$h" \
                  "$d/venv/bin/gtsamples" read "$gen" -o "$d/out.parquet" --no-progress 2>&1 | tail -n 1)
        else
            out=$(env HOME="$h" "$d/venv/bin/python" -c "import pyarrow.parquet as pq; pq.read_table('$d/t.parquet')")
        fi
        t1=$(date +%s.%N)
        printf 'round %s %-9s %6.2f s  files in its home: %s  %s\n' "$r" "$what" "$(echo "$t1 - $t0" | bc)" \
            "$(find "$h" -type f | wc -l)" "$out"
    done
done
