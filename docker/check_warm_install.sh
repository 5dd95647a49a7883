#!/usr/bin/env bash
# The Dockerfiles' install steps outside docker, then the image's CMD on the result:
#   pip install (not editable) -> gtsamples warmup --portable -> read-only -> gtsamples demo
# as another user (nobody, when run as root) with an empty HOME. Prints how many kernel
# specialisations the demo compiled (0 expected) and what it wrote to the user's cache.
#
#   docker/check_warm_install.sh [PYTHON]      (default .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
py=${1:-$PWD/.venv/bin/python}  # not resolved: a venv's python is a symlink
d=$(mktemp -d)
trap 'chmod -R u+w "$d"; rm -rf "$d"' EXIT
chmod 755 "$d"; mkdir -m 777 "$d/home"
"$py" -m pip install -q --no-deps --target "$d/site" . >"$d/pip.log" 2>&1 || { cat "$d/pip.log"; exit 1; }
PYTHONPATH="$d/site" "$py" -m gtsamples warmup --portable
chmod -R a-w,a+rX "$d/site"
cat >"$d/cmd.py" <<'PYEOF'
import gtsamples
from gtsamples import jit
from gtsamples.cli import main
rc = main(["demo", "--device", "cpu", "--series", "100", "--rows-per-series", "1000"])
print(f"package {gtsamples.__file__}: demo rc {rc}, kernel specialisations compiled: {len(jit.compiled())}")
PYEOF
as=()
[[ $(id -u) == 0 ]] && as=(setpriv --reuid=65534 --regid=65534 --clear-groups)
for run in 1 2; do
    HOME="$d/home" PYTHONPATH="$d/site" "${as[@]}" "$py" "$d/cmd.py" | tail -n 1
done
echo "files in the user's cache: $(find "$d/home" -type f | wc -l)"
