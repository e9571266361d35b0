# crypt.sh -- encryption at rest end to end (docs/encryption.md): the demo
# trainer saves with encrypt_key_file, resumes with the key (a file, the
# environment through a YAML config) and refuses without it; `verify`
# takes --key-file / --key-env; so do merge (plain output, the same bytes as
# an unencrypted run's) and reshard (output encrypted with the same key);
# names and shapes stay readable; a changed
# byte, a wrong key, a truncated file and bad key files fail clearly.
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

py "metadata.json: version 3, cipher, key id, a nonce and tag per chunk; data files are safetensors with readable names" <<EOF
import json, os, struct
m = json.load(open("$S100/metadata.json"))
assert m["version"] == 3 and m["cipher"] == "AES-256-GCM" and len(m["key_id"]) == 16, m
for name, t in m["tensors"].items():
    for c in t["chunks"]:
        assert len(c["aes_gcm"]) == 56, (name, c)
nonces = [c["aes_gcm"][:24] for t in m["tensors"].values() for c in t["chunks"]]
assert len(set(nonces)) == len(nonces), "a nonce used twice"
f = [x["name"] for x in m["files"] if "-model-" in x["name"]][0]
raw = open(os.path.join("$S100", f), "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
assert h["__metadata__"]["shardsafe_cipher"] == "AES-256-GCM", h["__metadata__"]
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
py "reshard: 2 ranks, the source's key id, a new save id, fresh nonces" <<EOF
import json
a = json.load(open("$S100/metadata.json"))
b = json.load(open("$WORK/rs/iteration_00000100/metadata.json"))
assert b["world_size"] == 2 and b["version"] == 3, b["world_size"]
assert b["key_id"] == a["key_id"] and b["save_id"] != a["save_id"], (a["save_id"], b["save_id"])
na = {c["aes_gcm"][:24] for t in a["tensors"].values() for c in t["chunks"]}
nb = {c["aes_gcm"][:24] for t in b["tensors"].values() for c in t["chunks"]}
assert not na & nb, "a nonce reused by reshard"
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
has "$WORK/out" "does not match its xxh3 checksum" "a changed byte is caught"
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
