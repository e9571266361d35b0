#!/usr/bin/env bash
# hf.sh -- a job started from Hugging Face weights (initial_load_in_hf,
# docs/hf.md), end to end: the demo trainer's weights written as a
# sharded BF16 Hugging Face model by an independent writer (mkst.py),
# under other names, loaded into the F32 trainer through the index and a
# name map (flags and YAML), trained on from there (a lower first loss than
# a fresh start; exact values are checked in tests/test_hfload*.c);
# hostile indexes and a wrong name map fail naming the file or tensors.
source "$(dirname "$0")/lib.bash"
TRAINER=${SHS_BUILD_DIR:?}/trainer
[ -x "$TRAINER" ] || { echo "no trainer at $TRAINER" >&2; exit 77; }

HF=$WORK/hf
mkdir -p "$HF"
expect 0 "train 20 steps" "$TRAINER" --steps 20 --save-path "$WORK/a" --save-interval 20 --log-every 0

# the trained weights as a Hugging Face model: BF16, "transformer." names,
# two shards and model.safetensors.index.json
"$PY" - "$WORK/a/iteration_00000020" "$HF" <<'PYEOF'
import glob, json, os, sys
import numpy as np
import mkst
src, hf = sys.argv[1], sys.argv[2]
(path,) = glob.glob(os.path.join(src, "*-model-*.safetensors"))
_, _, tensors, _ = mkst.read(path)
names = sorted(tensors)
shards = [names[: len(names) // 2], names[len(names) // 2 :]]
weight_map, total = {}, 0
for i, part in enumerate(shards):
    fname = "model-%05d-of-%05d.safetensors" % (i + 1, len(shards))
    entries = []
    for n in part:
        dtype, shape, raw = tensors[n]
        assert dtype == "F32"
        a = np.frombuffer(raw, dtype="<f4").reshape(shape)
        b = mkst.bf16_rne(a)
        hfname = "transformer." + n[len("model."):]
        entries.append((hfname, "BF16", list(shape), b.astype("<u2").tobytes()))
        weight_map[hfname] = fname
        total += b.nbytes
    mkst.write(os.path.join(hf, fname), entries, {"format": "pt"})
with open(os.path.join(hf, "model.safetensors.index.json"), "w") as f:
    json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
# a stray file the index does not name: never read
open(os.path.join(hf, "consolidated.safetensors"), "wb").write(b"not a safetensors file")
PYEOF

# start a new job from them (20 steps: the trainer's warmup)
expect 0 "start from the HF weights (flags)" "$TRAINER" --steps 20 --save-path "$WORK/b" \
    --save-interval 20 --log-every 1 --set initial_load_in_hf=true --set "initial_load_path=$HF" \
    --set "hf_name_map=transformer.=model."
cp "$WORK/out" "$WORK/b.out"
has "$WORK/out" "loaded Hugging Face weights $HF/model.safetensors.index.json from initial_load_path" "load reported"
has "$WORK/out" "weights only" "weights only"
has "$WORK/out" "global_step=20" "trained 20 steps"
expect 0 "the same from scratch" "$TRAINER" --steps 20 --save-path "$WORK/s" --save-interval 20 --log-every 1
cp "$WORK/out" "$WORK/s.out"

py "the pretrained start has a lower first loss than a fresh one" <<PYEOF
import re
def first_loss(p):
    return float(re.search(r"^step 1 loss ([0-9.]+)", open(p).read(), re.M).group(1))
hf, fresh = first_loss("$WORK/b.out"), first_loss("$WORK/s.out")
assert hf < fresh - 0.05, (hf, fresh)
PYEOF

# the same from YAML, through hf_assets_path (initial_load_path empty)
cat >"$WORK/hf.yaml" <<YEOF
checkpoint:
  initial_load_in_hf: true
  hf_assets_path: $HF
  hf_name_map:
    - "transformer.=model."
YEOF
expect 0 "start from the HF weights (YAML, hf_assets_path)" "$TRAINER" --steps 20 \
    --save-path "$WORK/c" --save-interval 20 --log-every 1 --config "$WORK/hf.yaml"
has "$WORK/out" "from hf_assets_path" "hf_assets_path used"
cmp -s <(grep "^step\|^final_digest" "$WORK/out") <(grep "^step\|^final_digest" "$WORK/b.out") &&
    pass "same run as with flags" || fail "YAML run differs from the flags run"

# a wrong name map: the registered tensors are missing, named
expect 1 "wrong name map" "$TRAINER" --steps 20 --save-path "$WORK/d" --log-every 0 \
    --set initial_load_in_hf=true --set "initial_load_path=$HF" --set "hf_name_map=transformer.=net."
has "$WORK/err" "registered tensor(s) not in the checkpoint: model.embed.weight" "missing tensors named"

# hostile indexes: the file is named
cp "$HF/model.safetensors.index.json" "$WORK/index.good"
sed 's/"model-00001-of-00002.safetensors"/"..\/model-00001-of-00002.safetensors"/' "$WORK/index.good" >"$HF/model.safetensors.index.json"
expect 1 "index pointing outside its folder" "$TRAINER" --steps 20 --save-path "$WORK/e" \
    --log-every 0 --set initial_load_in_hf=true --set "initial_load_path=$HF" \
    --set "hf_name_map=transformer.=model."
has "$WORK/err" "../model-00001-of-00002.safetensors" "outside file named"
sed 's/"model-00002-of-00002.safetensors"/"model-00009-of-00009.safetensors"/' "$WORK/index.good" >"$HF/model.safetensors.index.json"
expect 1 "index naming a missing file" "$TRAINER" --steps 20 --save-path "$WORK/e" \
    --log-every 0 --set initial_load_in_hf=true --set "initial_load_path=$HF" \
    --set "hf_name_map=transformer.=model."
has "$WORK/err" "names the file 'model-00009-of-00009.safetensors', which does not exist" "missing file named"
[ ! -e "$WORK/e/iteration_00000020" ] && pass "nothing saved after a failed load" || fail "a step was saved"
cp "$WORK/index.good" "$HF/model.safetensors.index.json"
finish
