#!/usr/bin/env bash
# python.pytest: the binding's pytest suite under $SHS_PYTHON (Debian's
# /usr/bin/python3).  Without pytest or numpy the suite cannot run: exit
# 77 (ctest shows it as skipped), never a silent pass.
#   run_pytest.sh          every test but the multi-process ones
#   run_pytest.sh --dist   the multi-process ones (python.dist: gloo ranks,
#                          mpirun, the train_torch.py kill/resume runs)
set -euo pipefail
PY=${SHS_PYTHON:-/usr/bin/python3}
for m in pytest numpy; do
  "$PY" -c "import $m" 2>/dev/null ||
    { echo "skipped: $PY cannot import $m (apt-get install python3-$m)"; exit 77; }
done
here=$(dirname "$0")
multi=("$here/test_dist.py" "$here/test_train_torch.py")
if [ "${1:-}" = --dist ]; then
  shift
  exec "$PY" -m pytest -q -rs -p no:cacheprovider "${multi[@]}" "$@"
fi
exec "$PY" -m pytest -q -rs -p no:cacheprovider "$here" \
  --ignore="${multi[0]}" --ignore="${multi[1]}" "$@"
