#!/usr/bin/env bash
# The model tools end to end under mpirun (real processes):
#  1. reshard: 4 ranks save (mpi_ckpt), `shardsafe reshard` to 2 ranks
#     (--world-size) and to 3 (a layout file, TP 4 -> 3 on dim 1), the
#     result loaded by that many ranks: every value right, every rank's
#     boxes exactly its chunks of the output (no resharding at load) and
#     only their bytes read;
#  2. MindSpore Checkpoint 2.0 (tests/gen_mscp2.py): distributed (4 ranks,
#     metadata.json; and remove_redundancy) and single-card directories
#     loaded on 2 and 3 ranks, plain and load_balanced; `shardsafe merge`
#     of them equal to the generator's tensors; resharded to 2 ranks;
#  3. Hugging Face initial load: the MPI trainer's checkpoint merged into
#     sharded BF16 files (index.json), loaded by 4 ranks with
#     initial_load_in_hf into F32 (folder and index.json as the path):
#     each rank reads exactly its boxes, load_balanced reads each byte once;
#     the TP x DP trainer started from the folder saves exactly its weights;
#  4. errors: a layout that does not divide a tensor (named, nothing
#     written); an index.json naming a missing file or one outside its
#     folder, a MindSpore directory missing a file: every rank fails with
#     the same message naming the file, and no rank hangs.
set -euo pipefail
: "${SHS_BUILD_DIR:?}"
SHS_SOURCE_DIR=${SHS_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
py=/usr/bin/python3
gen=$SHS_SOURCE_DIR/tests/gen_mscp2.py
cli=$SHS_BUILD_DIR/shardsafe
command -v mpirun > /dev/null || { echo "no mpirun" >&2; exit 77; }
for exe in mpi_tools mpi_ckpt trainer_mpi shardsafe; do
  [[ -x $SHS_BUILD_DIR/$exe ]] || { echo "$exe not built" >&2; exit 77; }
done
"$py" -c 'import numpy' 2> /dev/null || { echo "no numpy for $py" >&2; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0
work=$(mktemp -d "${TMPDIR:-/tmp}/shs-tools.XXXXXX")
trap 'rm -rf "$work"' EXIT
SECONDS=0
fail() { echo "FAIL: $*" >&2; cat "$work/out" >&2 2> /dev/null || true; exit 1; }
# every mpirun has a deadline: a rank left waiting in a collective is a
# failure, not a hung test
mpi() { timeout -k 5 60 mpirun -np "$1" --oversubscribe "${@:2}" > "$work/out" 2>&1; }
load() { # load NP SRC ARGS...: mpi_tools load on NP ranks, must succeed
  local np=$1
  shift
  mpi "$np" "$SHS_BUILD_DIR/mpi_tools" load "$@" || fail "mpi_tools load $* on $np ranks"
  [[ $(grep -c ": loaded step .* 0 wrong values" "$work/out") == "$np" ]] ||
    fail "values of $* on $np ranks"
}
# must_fail NP EXE ARGS...: the job fails (every rank returns), within the deadline
must_fail() {
  local rc=0
  mpi "$@" || rc=$?
  [[ $rc != 124 && $rc != 137 ]] || fail "${*:2}: hangs"
  [[ $rc != 0 ]] || fail "${*:2}: succeeded"
}
# sum of field "read N bytes" (or another) over the ranks of the last run
total() { grep -o "$1 [0-9]* bytes" "$work/out" | awk '{s += $2} END {print s + 0}'; }
# every rank: "own T of T" (each registered box is a chunk of the rank's
# own files) and "read B bytes, boxes B bytes" (nothing else was read)
no_reshard() {
  local n
  n=$(grep -cE ": loaded .* own ([0-9]+) of \1, read ([0-9]+) bytes, boxes \2 bytes" "$work/out" || true)
  [[ $n == "$1" ]] || fail "$2: not every rank loaded exactly its own chunks"
}
only_boxes() {
  local n
  n=$(grep -cE ": loaded .* read ([0-9]+) bytes, boxes \1 bytes" "$work/out" || true)
  [[ $n == "$1" ]] || fail "$2: a rank read more than its boxes"
}
# the same failure on every one of NP ranks, matching ERE $2
same_failure() {
  local np=$1 re=$2
  [[ $(grep -cE "^rank [0-9]+: load failed: .*$re" "$work/out") == "$np" ]] ||
    fail "$3: not every rank reports /$re/"
  [[ $(sed -n 's/^rank [0-9]*: load failed: //p' "$work/out" | sort -u | wc -l) == 1 ]] ||
    fail "$3: the ranks report different errors"
}

# ---------------------------------------------------------------- reshard
# "w" F32 [10, 6] = 100 i + j + step, its moment, "b" I64 [7] replicated;
# saved as a 2 x 2 grid on 4 ranks (device_matrix [2, 2]) and as uneven
# column blocks (TP 4)
mpi 4 "$SHS_BUILD_DIR/mpi_ckpt" save "$work/grid" 7 grid || fail "save grid"
mpi 4 "$SHS_BUILD_DIR/mpi_ckpt" save "$work/cols" 8 cols || fail "save cols"
mkdir "$work/r2" "$work/r3"
"$cli" reshard "$work/grid" "$work/r2/iteration_00000007" --world-size 2 > "$work/out" 2>&1 ||
  fail "reshard --world-size 2"
grep -q "(step 7, 4 ranks) into .* (2 ranks): 3 tensors" "$work/out" || fail "reshard summary"
# scaling TP 2 x 2 -> 2 keeps the outer (row) split: rows of w in 2 halves
load 2 "$work/r2/iteration_00000007" --ref "$work/grid" --chunks 'b=whole,*=rows'
grep -q "loaded step 7:" "$work/out" || fail "step of the resharded checkpoint"
no_reshard 2 "4 -> 2"
[[ $(total read) == $((2 * (5 * 6 * 4 * 2 + 7 * 8))) ]] || fail "4 -> 2 read $(total read) bytes"
# the same output loaded in another chunking: right values, but no longer
# the saved layout (the check above can fail)
load 2 "$work/r2/iteration_00000007" --ref "$work/grid" --chunks 'b=whole,*=cols'
[[ $(grep -c "own 1 of 3" "$work/out") == 2 ]] || fail "cols over a row split counted as own"
echo "ok: reshard 4 -> 2 (--world-size): 2 ranks load their own chunks, every value (${SECONDS}s)"

cat > "$work/tp3.json" << 'EOF'
{"world_size": 3, "tensors": {"*w": {"split_dim": 1}, "b": {"replicated": true}}}
EOF
"$cli" reshard "$work/cols" "$work/r3/iteration_00000008" --layout "$work/tp3.json" > "$work/out" 2>&1 ||
  fail "reshard --layout tp3.json"
models=("$work"/r3/iteration_00000008/checkpoint-model-000000[0-9]-0000003.safetensors)
[[ ${#models[@]} == 3 && -f ${models[2]} ]] ||
  fail "not 3 model files"
load 3 "$work/r3/iteration_00000008" --ref "$work/cols" --chunks 'b=whole,*=cols'
no_reshard 3 "TP 4 -> 3"
[[ $(total read) == $((3 * (10 * 2 * 4 * 2 + 7 * 8))) ]] || fail "4 -> 3 read $(total read) bytes"
# and the values are checked: another step's checkpoint is not the reference
mpi 4 "$SHS_BUILD_DIR/mpi_ckpt" save "$work/other" 9 cols || fail "save step 9"
must_fail 3 "$SHS_BUILD_DIR/mpi_tools" load "$work/r3/iteration_00000008" --ref "$work/other" \
  --chunks 'b=whole,*=cols'
[[ $(grep -c ": loaded step 8: 3 tensors, 0 wrong" "$work/out") == 0 ]] || fail "wrong values not seen"
echo "ok: reshard TP 4 -> 3 (--layout, split_dim 1): 3 ranks load their own chunks (${SECONDS}s)"

# ---------------------------------------------------------------- MindSpore
ms=$work/ms
"$py" "$gen" "$ms/d4" --ranks 4 --ref "$ms/ref.safetensors" > "$work/out" 2>&1 || fail "gen 4 ranks"
"$py" "$gen" "$ms/d1" --ranks 1 > "$work/out" 2>&1 || fail "gen single card"
"$py" "$gen" "$ms/rr" --ranks 4 --remove-redundancy > "$work/out" 2>&1 || fail "gen rr"
[[ -f $ms/d4/iteration_00002000/metadata.json && ! -e $ms/d1/iteration_00002000/metadata.json ]] ||
  fail "generator layout"
whole=780 # the generator's 9 tensors, model and optimizer
for n in 2 3; do
  for d in d4 d1 rr; do
    load "$n" "$ms/$d" --ref "$ms/ref.safetensors"
    [[ $(grep -c "loaded step 2000: 9 tensors" "$work/out") == "$n" ]] || fail "MindSpore $d on $n"
    only_boxes "$n" "MindSpore $d on $n ranks" # no checksums: only the boxes are read
  done
  load "$n" "$ms/d4" --ref "$ms/ref.safetensors" --chunks cols --balanced
  [[ $(total read) == "$whole" ]] || fail "MindSpore balanced on $n: read $(total read) bytes"
  echo "ok: MindSpore 4-rank, remove_redundancy and single-card on $n ranks, balanced too (${SECONDS}s)"
done
"$cli" merge "$ms/d4" "$ms/m4" --with-optimizer > "$work/out" 2>&1 || fail "merge d4"
"$py" "$gen" "$ms/m4" --check-merged --with-optimizer > "$work/out" 2>&1 || fail "merge d4: $(cat "$work/out")"
"$cli" merge "$ms/rr" "$ms/mrr" --max-shard-size 100 > "$work/out" 2>&1 || fail "merge rr"
[[ -f $ms/mrr/model.safetensors.index.json ]] || fail "merge rr: no index"
"$py" "$gen" "$ms/mrr" --check-merged > "$work/out" 2>&1 || fail "merge rr: $(cat "$work/out")"
"$cli" merge "$ms/d1" "$ms/m1" --dtype bf16 > "$work/out" 2>&1 || fail "merge d1"
"$py" "$gen" "$ms/m1" --check-merged --bf16 > "$work/out" 2>&1 || fail "merge d1: $(cat "$work/out")"
# the checker can fail: the bf16 merge is not the F32 tensors
"$py" "$gen" "$ms/m1" --check-merged > "$work/out" 2>&1 && fail "checker accepts BF16 for F32"
echo "ok: MindSpore merge (4 ranks + optimizer, remove_redundancy sharded, single card bf16) equals the generated tensors"
mkdir "$ms/r2"
"$cli" reshard "$ms/d4" "$ms/r2/iteration_00002000" --world-size 2 > "$work/out" 2>&1 || fail "reshard MindSpore"
load 2 "$ms/r2/iteration_00002000" --ref "$ms/ref.safetensors" --chunks saved
no_reshard 2 "MindSpore 4 -> 2"
echo "ok: MindSpore resharded 4 -> 2, loaded on 2 ranks as saved (${SECONDS}s)"

# ---------------------------------------------------------------- Hugging Face
tr=$work/tr
timeout -k 5 120 mpirun -np 4 --oversubscribe "$SHS_BUILD_DIR/trainer_mpi" --steps 4 --save-interval 4 \
  --log-every 0 --save-path "$tr" > "$work/out" 2>&1 || fail "trainer_mpi"
hf=$work/hf
"$cli" merge "$tr" "$hf" --dtype bf16 --max-shard-size 8KB > "$work/out" 2>&1 || fail "merge to HF"
[[ -f $hf/model.safetensors.index.json && ! -e $hf/model.safetensors ]] || fail "not sharded"
shards=("$hf"/model-0000[0-9]-of-0000[0-9].safetensors)
[[ ${#shards[@]} -ge 3 && -f ${shards[0]} ]] || fail "fewer than 3 shards"
size=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["metadata"]["total_size"])' \
  "$hf/model.safetensors.index.json")
# BF16 files into F32 registered tensors: the trainer's F32 weights rounded
# to BF16 (--round), rows (uneven on 44) or columns, biases whole
for path in "$hf" "$hf/model.safetensors.index.json"; do
  for chunks in rows '*bias=whole,*=cols'; do
    # the job's own save path is empty: it starts from the HF weights
    mkdir -p "$work/job"
    load 4 "$path" --hf --ref "$tr" --model-only --as f32 --round bf16 --chunks "$chunks" \
      --save-path "$work/job"
    [[ $(grep -c "loaded step -1: 5 tensors" "$work/out") == 4 ]] || fail "HF: not 5 tensors"
    only_boxes 4 "HF $path $chunks"
    load 4 "$path" --hf --ref "$tr" --model-only --as f32 --round bf16 --chunks "$chunks" --balanced
    [[ $(total read) == "$size" ]] || fail "HF balanced $chunks read $(total read) bytes, not $size"
  done
done
# the values are compared: unrounded F32 is not what BF16 files hold
must_fail 4 "$SHS_BUILD_DIR/mpi_tools" load "$hf" --hf --ref "$tr" --model-only --as f32
[[ $(grep -c ": loaded step -1: 5 tensors, [1-9][0-9]* wrong values" "$work/out") == 4 ]] ||
  fail "BF16 values equal to unrounded F32"
echo "ok: HF initial load (BF16 -> F32) on 4 ranks: each reads its boxes, balanced each byte once (${SECONDS}s)"
# a real job: the TP 2 x DP 2 trainer starts from the HF folder; its step-0
# save holds exactly the BF16 weights (in F32), not the unrounded originals
timeout -k 5 120 mpirun -np 4 --oversubscribe "$SHS_BUILD_DIR/trainer_mpi" --set initial_load_in_hf=true \
  --set initial_load_path="$hf" --save-path "$work/job2" --steps 0 --log-every 0 > "$work/out" 2>&1 ||
  fail "trainer_mpi from the HF folder"
grep -q "initialised from Hugging Face weights .*model.safetensors.index.json (weights only)" "$work/out" ||
  fail "trainer_mpi did not start from the HF weights"
load 3 "$work/job2" --ref "$hf" --as f32 --no-optim
must_fail 3 "$SHS_BUILD_DIR/mpi_tools" load "$work/job2" --ref "$tr" --model-only --no-optim
echo "ok: trainer_mpi (tp 2 x dp 2) started from the HF folder saves exactly its weights (${SECONDS}s)"

# ---------------------------------------------------------------- errors
cat > "$work/bad.json" << 'EOF'
{"world_size": 4, "tensors": {"*w": {"split_dim": 0}, "b": {"replicated": true}}}
EOF
mkdir "$work/rb"
"$cli" reshard "$work/cols" "$work/rb/iteration_00000008" --layout "$work/bad.json" > "$work/out" 2>&1 &&
  fail "a layout that does not divide w was accepted"
grep -q "tensor '[a-z_.]*w': dimension 0 (size 10) does not divide into 4 equal slices" "$work/out" ||
  fail "the undivided tensor is not named"
[[ -z $(ls -A "$work/rb") ]] || fail "reshard left $(ls -A "$work/rb")"
echo "ok: a layout that does not divide a tensor: named, nothing written"

cp -a "$hf" "$work/hf-missing"
rm "$work/hf-missing/model-00002-of-0000"?.safetensors
must_fail 4 "$SHS_BUILD_DIR/mpi_tools" load "$work/hf-missing" --hf --ref "$tr" --model-only --as f32
same_failure 4 "model-00002-of-0000[0-9]\.safetensors" "missing file"
cp -a "$hf" "$work/hf-outside"
sed -i 's/"model-00001-of-\(0000[0-9]\)/"..\/model-00001-of-\1/' "$work/hf-outside/model.safetensors.index.json"
must_fail 4 "$SHS_BUILD_DIR/mpi_tools" load "$work/hf-outside/model.safetensors.index.json" --hf \
  --ref "$tr" --model-only --as f32 --balanced
same_failure 4 "\.\./model-00001-of-0000[0-9]\.safetensors" "outside"
# a long path: the agreed message once stopped at 200 bytes, before the file
bad=$ms/a-long-folder-name-that-pushes-the-error-message-past-two-hundred-bytes/bad
"$py" "$gen" "$bad" --ranks 4 --variant missing_file > "$work/out" 2>&1 || fail "gen missing_file"
must_fail 3 "$SHS_BUILD_DIR/mpi_tools" load "$bad" --ref "$ms/ref.safetensors"
same_failure 3 "checkpoint-model-0000003-0000004\.safetensors', which does not exist" "MindSpore missing file"
echo "ok: an index naming a missing file or one outside its folder, a MindSpore directory missing a file: every rank fails with the same error (${SECONDS}s)"
echo "tools: all checks passed in ${SECONDS}s"
