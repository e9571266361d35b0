#!/usr/bin/env bash
# python.pytest: the binding's pytest suite under $SHS_PYTHON (Debian's
# /usr/bin/python3).  Without pytest or numpy the suite cannot run: exit
# 77 (ctest shows it as skipped), never a silent pass.
set -euo pipefail
PY=${SHS_PYTHON:-/usr/bin/python3}
for m in pytest numpy; do
  "$PY" -c "import $m" 2>/dev/null ||
    { echo "skipped: $PY cannot import $m (apt-get install python3-$m)"; exit 77; }
done
exec "$PY" -m pytest -q -rs -p no:cacheprovider "$(dirname "$0")" "$@"
