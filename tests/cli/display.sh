# display.sh -- text output for people: tables aligned by display width
# (CJK two columns, combining marks none), ls sizes in KiB/MiB and ages.
. "$(dirname "$0")/lib.bash"

: "${SHS_BUILD_DIR:?SHS_BUILD_DIR must name the build directory}"

"$PY" - <<'EOF'
import os, numpy as np, mkst
W = os.environ["WORK"]
mkst.write(f"{W}/wide.safetensors", [
    mkst.entry("\u6743\u91cd", np.zeros(2, np.float32)),          # CJK: 4 columns
    mkst.entry("e\u0301x", np.zeros(3, np.float32)),              # combining acute: 2 columns
    mkst.entry("\uff46\uff55\uff4c\uff4c", np.zeros(1, np.int64)),  # fullwidth: 8 columns
    mkst.entry("plain_ascii_name", np.zeros(4, np.float16)),
])
EOF
expect 0 "inspect names of every width" "$SHS_BIN" inspect "$WORK/wide.safetensors"
cp "$WORK/out" "$WORK/wide.txt"
py "the columns after NAME start at the same display column in every row" <<'EOF'
import os, unicodedata
def width(s):
    # independent of the C code: Python's Unicode database
    return sum(0 if unicodedata.combining(c) else
               2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in s)
lines = open(os.environ["WORK"] + "/wide.txt", encoding="utf-8").read().splitlines()
head = next(i for i, l in enumerate(lines) if l.lstrip().startswith("NAME"))
rows = lines[head:head + 5]
assert len(rows) == 5 and all(r.startswith("  ") for r in rows), rows
cols = []
for r in rows:
    # the DTYPE column: the first text after the name's padding
    key = "DTYPE" if "DTYPE" in r else next(d for d in ("F32", "F16", "I64") if (" " + d + " ") in r)
    cols.append(width(r[:r.index(key, 2)]))
assert len(set(cols)) == 1, (cols, rows)
names = [r.split("  ")[1] for r in rows[1:]]
assert "\u6743\u91cd" in names[0] + names[1] + names[2] + names[3], names
EOF

# ---- ls: human sizes and ages ----
SP="$WORK/save"
"$SHS_BUILD_DIR/trainer" --steps 30 --save-path "$SP" --save-interval 10 --log-every 0 >"$WORK/train.log" 2>&1 ||
    { cat "$WORK/train.log" >&2; exit 1; }
touch -d '-3 minutes -5 seconds' "$SP/iteration_00000010"
touch -d '-5 days -1 hour' "$SP/iteration_00000020"
expect 0 "ls" "$SHS_BIN" ls "$SP"
cp "$WORK/out" "$WORK/ls.txt"
has "$WORK/ls.txt" "3 min ago" "age in minutes"
has "$WORK/ls.txt" "5 days ago" "age in days"
expect 0 "ls --json" "$SHS_BIN" ls --json "$SP"
cp "$WORK/out" "$WORK/ls.json"
py "ls: sizes in KiB/MiB as the exact bytes of --json say; ages from mtime" <<EOF
import json, os
d = json.load(open("$WORK/ls.json"))
text = open("$WORK/ls.txt").read()
def human(n):
    if n < 1024:
        return "%d B" % n
    for u in ["KiB", "MiB", "GiB", "TiB"]:
        n /= 1024
        if n < 1024:
            return "%.1f %s" % (n, u)
for s in d["steps"]:
    row = next(l for l in text.splitlines() if l.rstrip().endswith(s["name"]) or (s["name"] + "  ") in l)
    assert human(s["bytes"]) in row, (human(s["bytes"]), row)
    assert s["mtime"] == int(os.stat(os.path.join("$SP", s["name"])).st_mtime)
assert d["now"] - d["steps"][1]["mtime"] >= 5 * 86400
EOF
mkdir "$SP/.tmp-iteration_00000040-abc"
touch -d '-2 hours -1 minute' "$SP/.tmp-iteration_00000040-abc"
expect 0 "ls with a leftover" "$SHS_BIN" ls "$SP"
has "$WORK/out" "leftover (failed save): .tmp-iteration_00000040-abc (" "leftover listed"
has "$WORK/out" "2 h ago)" "leftover age in hours"
expect 0 "ls -q prints nothing" "$SHS_BIN" ls -q "$SP"
[ -s "$WORK/out" ] && { fail "ls -q printed"; show_output; } || true

finish
