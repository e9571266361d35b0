# crypt.sh -- encryption at rest end to end (docs/encryption.md): the demo
# trainer saves with encrypt_key_file, resumes with the key (a file, the
# environment through a YAML config) and refuses without it; `verify`
# takes --key-file / --key-env; so do merge (plain output, the same bytes as
# an unencrypted run's) and reshard (output encrypted with the same key);
# names and shapes stay readable; a changed
# byte, a wrong key, a truncated file and bad key files fail clearly.  An
# encrypted checkpoint stripped of its encryption (issue 19, 8a) is refused
# by verify, merge and the trainer; an unencrypted save path with a key
# configured needs allow_unencrypted_resume; a version-3 checkpoint (the
# release before) still verifies and merges.
. "$(dirname "$0")/lib.bash"

: "${SHS_BUILD_DIR:?SHS_BUILD_DIR must name the build directory}"
TRAINER="$SHS_BUILD_DIR/trainer"
[ -x "$TRAINER" ] || { echo "not executable: $TRAINER" >&2; exit 1; }

KEY="$WORK/key.bin"
OTHER="$WORK/other.bin"
"$PY" -c "import sys; sys.stdout.buffer.write(bytes(range(7, 39)))" >"$KEY"
"$PY" -c "import sys; sys.stdout.buffer.write(bytes(range(100, 132)))" >"$OTHER"
HEX=$("$PY" -c "print(bytes(range(7, 39)).hex())")

SP="$WORK/save"
expect 0 "trainer saves encrypted" "$TRAINER" --steps 100 --save-path "$SP" --save-interval 50 \
    --log-every 0 --set "encrypt_key_file=$KEY"
S100="$SP/iteration_00000100"

py "metadata.json: version 4, cipher, key id, segment size, a salt and a tag per segment per chunk, its MAC; data files are safetensors with readable names" <<EOF
import json, os, struct
m = json.load(open("$S100/metadata.json"))
assert m["version"] == 4 and m["cipher"] == "AES-256-GCM-STREAM" and len(m["key_id"]) == 16, m
seg = m["segment_bytes"]
assert seg == 1 << 20, seg
assert len(m["metadata_mac"]) == 64
for name, t in m["tensors"].items():
    for c in t["chunks"]:
        n = c["byte_range"][1] - c["byte_range"][0]
        assert len(c["gcm_salt"]) == 32, (name, c)
        assert len(c["gcm_tags"]) == 32 * max(1, -(-n // seg)), (name, n, len(c["gcm_tags"]))
        assert "aes_gcm" not in c
salts = [c["gcm_salt"] for t in m["tensors"].values() for c in t["chunks"]]
assert len(set(salts)) == len(salts), "a salt used twice"
text = open("$S100/metadata.json", "rb").read()
assert text.endswith(b'",\n"metadata_xxh3":"' + m["metadata_xxh3"].encode() + b'"\n}\n'), text[-140:]
f = [x["name"] for x in m["files"] if "-model-" in x["name"]][0]
raw = open(os.path.join("$S100", f), "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
assert h["__metadata__"]["shardsafe_cipher"] == "AES-256-GCM-STREAM", h["__metadata__"]
assert set(k for k in h if k != "__metadata__") == \
    set(k for k, t in m["tensors"].items() if t["kind"] == "model")
EOF

# ---- verify ----
expect 1 "verify without the key fails" "$SHS_BIN" verify "$S100"
has "$WORK/out" "key required" "verify says the key is required"
has "$WORK/out" "checksums match" "verify without the key still checked the checksums"
expect 0 "verify --key-file" "$SHS_BIN" verify --key-file "$KEY" "$S100"
has "$WORK/out" "note: encrypted (AES-256-GCM, key id" "verify notes the encryption"
export SHS_CRYPT_TEST_KEY="$HEX"
expect 0 "verify --key-env (hex key in the environment) of the save path" \
    "$SHS_BIN" verify --key-env SHS_CRYPT_TEST_KEY "$SP"
expect 0 "verify --json --key-file" "$SHS_BIN" verify --json --key-file "$KEY" "$S100"
py "verify --json says encrypted" <<EOF
import json
d = json.load(open("$WORK/out"))
assert d["ok"] is True and d["results"][0]["encrypted"] is True, d
EOF
expect 1 "verify with another key" "$SHS_BIN" verify --key-file "$OTHER" "$S100"
has "$WORK/out" "wrong key" "verify names a wrong key"
expect 1 "verify --key-env of an unset variable" "$SHS_BIN" verify --key-env SHS_CRYPT_UNSET "$S100"
has "$WORK/err" "SHS_CRYPT_UNSET (the encryption key) is not set" "unset variable named"
expect 1 "verify --key-file of a missing file" "$SHS_BIN" verify --key-file "$WORK/nokey" "$S100"
has "$WORK/err" "nokey" "missing key file named"
head -c 31 "$KEY" >"$WORK/short.bin"
expect 1 "verify --key-file of a short key" "$SHS_BIN" verify --key-file "$WORK/short.bin" "$S100"
has "$WORK/err" "not 31 bytes" "short key file refused"
cat "$KEY" "$KEY" >"$WORK/long.bin"
expect 1 "verify --key-file of a long key" "$SHS_BIN" verify --key-file "$WORK/long.bin" "$S100"
has "$WORK/err" "not 64 bytes" "long key file refused"
expect 2 "verify with both --key-file and --key-env" \
    "$SHS_BIN" verify --key-file "$KEY" --key-env SHS_CRYPT_TEST_KEY "$S100"

# ---- names and shapes without the key ----
expect 0 "inspect of an encrypted step directory needs no key" "$SHS_BIN" inspect "$S100"
has "$WORK/out" "model.hidden.weight" "inspect lists tensor names"
has "$WORK/out" "encrypted:  AES-256-GCM, key id" "inspect says it is encrypted"
expect 0 "inspect --json" "$SHS_BIN" inspect --json "$S100"
py "inspect --json says encrypted" <<EOF
import json
d = json.load(open("$WORK/out"))
assert d["encrypted"] is True, d.keys()
EOF

# ---- resume ----
expect 1 "resume without the key fails" "$TRAINER" --steps 150 --save-path "$SP" \
    --save-interval 50 --log-every 0
has "$WORK/err" "key required" "the trainer says the key is required"
cat >"$WORK/train.yaml" <<EOF
checkpoint:
  save_path: "$SP"
  save_interleaved_steps: 50
  encrypt_key_env: SHS_CRYPT_TEST_KEY
EOF
expect 0 "resume with the key from the environment (YAML config)" "$TRAINER" \
    --config "$WORK/train.yaml" --steps 150 --log-every 0
has "$WORK/out" "resumed from $S100" "resumed from the encrypted step"
expect 0 "the new step verifies with the key" "$SHS_BIN" verify --key-file "$KEY" \
    "$SP/iteration_00000150"

# ---- merge and reshard take the key ----
expect 0 "the same run unencrypted (the reference)" "$TRAINER" --steps 100 \
    --save-path "$WORK/plain" --save-interval 50 --log-every 0
expect 0 "merge of the unencrypted run" "$SHS_BIN" merge "$WORK/plain" "$WORK/hf-plain"
expect 1 "merge without the key fails" "$SHS_BIN" merge "$S100" "$WORK/hf-nokey"
has "$WORK/err" "key required" "merge says the key is required"
[ ! -e "$WORK/hf-nokey" ] && pass "merge without the key: nothing written" ||
    fail "merge without the key left output"
expect 1 "merge with another key fails" "$SHS_BIN" merge --key-file "$OTHER" "$S100" "$WORK/hf-other"
has "$WORK/err" "wrong key" "merge names a wrong key"
expect 2 "merge with both --key-file and --key-env" "$SHS_BIN" merge --key-file "$KEY" \
    --key-env SHS_CRYPT_TEST_KEY "$S100" "$WORK/hf-both"
expect 0 "merge --key-file" "$SHS_BIN" merge --key-file "$KEY" "$S100" "$WORK/hf-enc"
expect 0 "the merged files of the encrypted run equal the unencrypted run's, byte for byte" \
    cmp "$WORK/hf-plain/model.safetensors" "$WORK/hf-enc/model.safetensors"
expect 1 "reshard without the key fails" "$SHS_BIN" reshard "$S100" "$WORK/rs-nokey" --world-size 2
has "$WORK/err" "key required" "reshard says the key is required"
[ ! -e "$WORK/rs-nokey" ] && pass "reshard without the key: nothing written" ||
    fail "reshard without the key left output"
mkdir -p "$WORK/rs"
expect 0 "reshard --key-env to 2 ranks" "$SHS_BIN" reshard --key-env SHS_CRYPT_TEST_KEY "$S100" \
    "$WORK/rs/iteration_00000100" --world-size 2
expect 1 "the resharded checkpoint is encrypted: verify without the key fails" \
    "$SHS_BIN" verify "$WORK/rs/iteration_00000100"
has "$WORK/out" "key required" "the resharded checkpoint needs the key"
expect 0 "the resharded checkpoint verifies with the key" "$SHS_BIN" verify --key-file "$KEY" \
    "$WORK/rs/iteration_00000100"
py "reshard: 2 ranks, the source's key id, a new save id, fresh salts" <<EOF
import json
a = json.load(open("$S100/metadata.json"))
b = json.load(open("$WORK/rs/iteration_00000100/metadata.json"))
assert b["world_size"] == 2 and b["version"] == 4, b["world_size"]
assert b["key_id"] == a["key_id"] and b["save_id"] != a["save_id"], (a["save_id"], b["save_id"])
na = {c["gcm_salt"] for t in a["tensors"].values() for c in t["chunks"]}
nb = {c["gcm_salt"] for t in b["tensors"].values() for c in t["chunks"]}
assert not na & nb, "a salt reused by reshard"
EOF
expect 0 "merge of the resharded checkpoint" "$SHS_BIN" merge --key-file "$KEY" \
    "$WORK/rs/iteration_00000100" "$WORK/hf-rs"
expect 0 "the resharded checkpoint holds the same tensors, byte for byte" \
    cmp "$WORK/hf-plain/model.safetensors" "$WORK/hf-rs/model.safetensors"

# ---- damage ----
cp -a "$SP" "$WORK/bad"
B100="$WORK/bad/iteration_00000100"
MODEL=$(cd "$B100" && ls checkpoint-model-*.safetensors)
"$PY" - <<EOF
p = "$B100/$MODEL"
b = bytearray(open(p, "rb").read())
b[-5] ^= 1
open(p, "wb").write(b)
EOF
expect 1 "verify --key-file of a changed byte" "$SHS_BIN" verify --key-file "$KEY" "$B100"
has "$WORK/out" "checksum mismatch (stored 0x" "a changed byte is caught"
"$PY" - <<EOF
import sys
sys.path.insert(0, "$SHS_SOURCE_DIR/tests/cli")
from reseal import reseal, xxh3
import json
m = json.load(open("$B100/metadata.json"))
raw = open("$B100/$MODEL", "rb").read()
files = [f["name"] for f in m["files"]]
for t in m["tensors"].values():
    for c in t["chunks"]:
        if files[c["file"]] == "$MODEL":
            c["xxh3"] = xxh3(raw[c["byte_range"][0]:c["byte_range"][1]])
            c.pop("xxh3_blocks", None)
reseal("$B100", m)
EOF
expect 1 "verify --key-file of a changed byte whose checksum was mended" \
    "$SHS_BIN" verify --key-file "$KEY" "$B100"
has "$WORK/out" "does not authenticate" "GCM refuses what the checksums no longer see"
truncate -s -1 "$WORK/bad/iteration_00000150/$MODEL"
expect 1 "verify --key-file of a truncated file" "$SHS_BIN" verify --key-file "$KEY" \
    "$WORK/bad/iteration_00000150"
has "$WORK/out" "$MODEL" "the truncated file is named"

# ---- downgrades (issue 19, 8a): the encryption stripped from metadata.json ----
cp -a "$SP" "$WORK/dg"
"$PY" - <<EOF
import sys, json, os
sys.path.insert(0, "$SHS_SOURCE_DIR/tests/cli")
from reseal import reseal
for step in ("iteration_00000100", "iteration_00000150"):
    d = os.path.join("$WORK/dg", step)
    m = json.load(open(os.path.join(d, "metadata.json")))
    for k in ("cipher", "key_id", "save_id", "segment_bytes", "metadata_mac"):
        m.pop(k, None)
    m["version"] = 2
    for t in m["tensors"].values():
        for c in t["chunks"]:
            for k in ("gcm_salt", "gcm_tags", "aes_gcm"):
                c.pop(k, None)
    reseal(d, m)
EOF
DG="$WORK/dg/iteration_00000150"
expect 1 "verify --key-file of a downgraded checkpoint fails" "$SHS_BIN" verify --key-file "$KEY" "$DG"
has "$WORK/out" "not encrypted, but a key was given" "verify: the key authenticates nothing there"
expect 1 "verify of a downgraded checkpoint fails" "$SHS_BIN" verify "$DG"
has "$WORK/out" "its header says it is encrypted" "verify: the data files say they are encrypted"
expect 1 "merge --key-file of a downgraded checkpoint fails" "$SHS_BIN" merge --key-file "$KEY" \
    "$DG" "$WORK/hf-dg"
has "$WORK/err" "not encrypted, but a key was given" "merge: the key authenticates nothing there"
expect 1 "merge of a downgraded checkpoint fails" "$SHS_BIN" merge "$DG" "$WORK/hf-dg"
has "$WORK/err" "its header says it is encrypted" "merge never writes ciphertext as weights"
[ ! -e "$WORK/hf-dg" ] && pass "merge of a downgraded checkpoint: nothing written" ||
    fail "merge of a downgraded checkpoint left output"
expect 2 "diff of a downgraded checkpoint against the plain run fails" "$SHS_BIN" diff "$DG" \
    "$WORK/plain"
has "$WORK/err" "its header says it is encrypted" "diff never reads ciphertext as values"
expect 1 "the trainer, key configured, does not resume from a downgraded save path" "$TRAINER" \
    --steps 200 --save-path "$WORK/dg" --save-interval 50 --log-every 0 \
    --set "encrypt_key_file=$KEY"
has "$WORK/err" "allow_unencrypted_resume" "the trainer names the way out"
expect 1 "... nor with allow_unencrypted_resume: the data files are encrypted" "$TRAINER" \
    --steps 200 --save-path "$WORK/dg" --save-interval 50 --log-every 0 \
    --set "encrypt_key_file=$KEY" --set allow_unencrypted_resume=true
has "$WORK/err" "its header says it is encrypted" "the trainer never resumes on ciphertext"
expect 1 "... nor without a key" "$TRAINER" --steps 200 --save-path "$WORK/dg" \
    --save-interval 50 --log-every 0
has "$WORK/err" "its header says it is encrypted" "the trainer without a key refuses it too"

# ---- an unencrypted save path, a key configured ----
cp -a "$WORK/plain" "$WORK/plain2"
expect 1 "the trainer with a key does not resume from an unencrypted save path" "$TRAINER" \
    --steps 150 --save-path "$WORK/plain2" --save-interval 50 --log-every 0 \
    --set "encrypt_key_file=$KEY"
has "$WORK/err" "not encrypted, but a key is configured" "the refusal says why"
expect 0 "... unless allow_unencrypted_resume: true" "$TRAINER" --steps 150 \
    --save-path "$WORK/plain2" --save-interval 50 --log-every 0 \
    --set "encrypt_key_file=$KEY" --set allow_unencrypted_resume=true
has "$WORK/out" "resumed from $WORK/plain2/iteration_00000100" "resumed from the unencrypted step"
expect 0 "its new step is encrypted" "$SHS_BIN" verify --key-file "$KEY" \
    "$WORK/plain2/iteration_00000150"
expect 0 "pretrained weights through load_path with a key configured" "$TRAINER" --steps 150 \
    --load-path "$WORK/plain" --save-path "$WORK/from-plain" --save-interval 50 --log-every 0 \
    --set "encrypt_key_file=$KEY"

# ---- version 3 (the release before): still verified and merged ----
cp -a "$SHS_SOURCE_DIR/tests/golden/crypt_v3" "$WORK/v3"
"$PY" -c "import sys; sys.stdout.buffer.write(bytes(range(1, 33)))" >"$WORK/v3.key"
expect 0 "verify --key-file of a version-3 checkpoint" "$SHS_BIN" verify --key-file "$WORK/v3.key" \
    "$WORK/v3/iteration_00000003"
has "$WORK/out" "note: encrypted" "version 3: every chunk authenticated"
expect 1 "verify --key-file of a version-3 checkpoint with another key" "$SHS_BIN" verify \
    --key-file "$KEY" "$WORK/v3/iteration_00000003"
has "$WORK/out" "wrong key" "version 3: a wrong key named"
expect 0 "merge --key-file of a version-3 checkpoint" "$SHS_BIN" merge --key-file "$WORK/v3.key" \
    "$WORK/v3" "$WORK/hf-v3"
py "version 3: the merged weights are the saved ones" <<EOF
import json, struct
import numpy as np
raw = open("$WORK/hf-v3/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
def t(name):
    b, e = h[name]["data_offsets"]
    return np.frombuffer(raw[8 + n + b:8 + n + e], dtype=np.float32)
assert (t("a") == 3 + np.arange(12, dtype=np.float32)).all()
assert (t("big") == 3 + (np.arange(128 * 256) % 1000).astype(np.float32)).all()
EOF

# ---- MPI: 2 ranks save encrypted, 3 ranks resume with load_balanced ----
MPI_TRAINER="$SHS_BUILD_DIR/trainer_mpi"
if [ -x "$MPI_TRAINER" ] && command -v mpirun >/dev/null; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    export OMPI_MCA_rmaps_base_oversubscribe=1
    export ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0
    mpi() { mpirun -np "$1" --oversubscribe -x SHS_CRYPT_TEST_KEY "$MPI_TRAINER" "${@:2}"; }
    for mode in plain enc; do
        extra=(--log-every 0)
        [ "$mode" = enc ] && extra+=(--set "encrypt_key_env=SHS_CRYPT_TEST_KEY")
        expect 0 "mpi $mode: 2 ranks save (remove_redundancy)" mpi 2 --steps 100 \
            --save-interval 50 --save-path "$WORK/mpi-$mode" \
            --set remove_redundancy=true "${extra[@]}"
        expect 0 "mpi $mode: 3 ranks resume (load_balanced) and train on" mpi 3 --tp 1 \
            --steps 150 --save-interval 50 --load-path "$WORK/mpi-$mode" \
            --save-path "$WORK/mpi2-$mode" --set load_balanced=true "${extra[@]}"
        sed -n 's/^final_digest=//p' "$WORK/out" >"$WORK/digest-$mode"
    done
    py "mpi: the encrypted run ends bitwise equal to the unencrypted one" <<EOF
a, b = open("$WORK/digest-plain").read().strip(), open("$WORK/digest-enc").read().strip()
assert a and a == b, (a, b)
EOF
    expect 0 "mpi: the 3-rank encrypted save verifies with the key" \
        "$SHS_BIN" verify --key-file "$KEY" "$WORK/mpi2-enc"
    has "$WORK/out" "note: encrypted" "the 3-rank save is encrypted"
    expect 1 "mpi: 3 ranks cannot resume the encrypted save without the key" mpi 3 --tp 1 \
        --steps 150 --log-every 0 --load-path "$WORK/mpi-enc" --save-path "$WORK/mpi3"
    has "$WORK/err" "key required" "the ranks say the key is required"
else
    skip "no trainer_mpi or mpirun: the MPI part"
fi

finish
