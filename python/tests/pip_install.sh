#!/usr/bin/env bash
# python.pip_install: `pip install --no-build-isolation` of the package into
# a venv made with --system-site-packages (Debian's numpy and torch), from a
# copy of the sources (pip builds in the tree it is given), with no index:
# nothing may be downloaded.  Then the installed package round-trips a file.
set -euo pipefail
: "${SHS_SOURCE_DIR:?}"
PY=${SHS_PYTHON:-/usr/bin/python3}
if [[ -n "${SHS_PY_SANITIZED:-}" ]]; then
  echo "skipped: sanitizer build (pip builds its own, uninstrumented module)"; exit 77
fi
"$PY" -c 'import venv, setuptools, wheel, numpy' 2>/dev/null ||
  { echo "skipped: $PY lacks venv/setuptools/wheel/numpy (scripts/setup.sh)"; exit 77; }
work=$(mktemp -d "${TMPDIR:-/tmp}/shs-pip-XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir "$work/src"
cp -r "$SHS_SOURCE_DIR/python" "$SHS_SOURCE_DIR/src" "$SHS_SOURCE_DIR/include" \
  "$SHS_SOURCE_DIR/cmake" "$work/src/"
rm -rf "$work/src/python/build" "$work/src/python/"*.egg-info
"$PY" -m venv --system-site-packages "$work/venv"
PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 "$work/venv/bin/pip" install -q \
  --no-build-isolation "$work/src/python"
cd "$work"
env -u PYTHONPATH "$work/venv/bin/python" - <<'PYEOF'
import os, numpy as np, shardsafe, shardsafe.numpy as snp
assert shardsafe.__file__.startswith(os.path.join(os.getcwd(), "venv")), shardsafe.__file__
a = np.arange(6, dtype=np.float32).reshape(2, 3)
snp.save_file({"a": a}, "t.safetensors", metadata={"k": "v"})
with shardsafe.safe_open("t.safetensors", "np") as f:
    assert f.metadata() == {"k": "v"} and (f.get_tensor("a") == a).all()
try:
    snp.load_file("missing.safetensors")
except shardsafe.ShardsafeFileNotFoundError as e:
    assert "missing.safetensors" in str(e)
else:
    raise AssertionError("no error for a missing file")
print("ok: installed", shardsafe.__version__, "at", os.path.dirname(shardsafe.__file__))
PYEOF
