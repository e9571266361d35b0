#!/usr/bin/env bash
# seeds.sh -- the seeds' configurations run verbatim with the demo trainer
# (tests/fixtures/seeds, README there):
#   002  resume_llama2.yaml: the first run starts fresh (said in the log),
#        a run killed with SIGKILL and restarted resumes and ends bitwise
#        equal to an uninterrupted one; train: epochs/batch_size honoured;
#        keys that are neither the library's nor the trainer's refused
#   000  every save and load example: it saves where it says, loads what
#        it says (the full example resumes at step 2000)
#   torchtitan's enable: false loads nothing and saves nothing; load_step
#   that cannot be honoured fails; strict_load gets "did you mean".
. "$(dirname "$0")/lib.bash"

: "${SHS_BUILD_DIR:?SHS_BUILD_DIR must name the build directory}"
TRAINER="$SHS_BUILD_DIR/trainer"
[ -x "$TRAINER" ] || { echo "not executable: $TRAINER" >&2; exit 1; }
FIX="$SHS_SOURCE_DIR/tests/fixtures/seeds"
PID=
cleanup() {
    if [ -n "$PID" ]; then kill -9 "$PID" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT
value() { sed -n "s/^$1=//p" "$2" | tail -1; }
# a small corpus: ten epochs of seed 002 are 1240 steps
head -c 1000 "$SHS_SOURCE_DIR/examples/tinylm/corpus.txt" >"$WORK/corpus.txt"
SMALL=(--corpus "$WORK/corpus.txt" --log-every 0)

# ---------------------------------------------------------------- 002
Y2="$FIX/resume_llama2.yaml"
mkdir -p "$WORK/ref" "$WORK/job"
cd "$WORK/ref"
expect 0 "seed 002 verbatim: an uninterrupted run" "$TRAINER" --config "$Y2" "${SMALL[@]}"
cp "$WORK/out" "$WORK/ref.out"
has "$WORK/ref.out" "train: 10 epochs of 124 steps (992 samples, batch_size 8) = 1240 steps" \
    "train: epochs and batch_size are honoured"
has "$WORK/ref.out" "starting from scratch: nothing to resume in save_path './output/checkpoint' (load_path names it too): fresh start" \
    "the first run (nothing there yet) is a fresh start, said in the log"
has "$WORK/ref.out" "resume_llama2.yaml:2: model: model_type 'llama2' names a model this demo does not build" \
    "model: model_type is the trainer's, and it says what it does with it"
has "$WORK/ref.out" "resume_llama2.yaml:9: train: integrated_save: true: each rank saves its own slice" \
    "integrated_save is accepted with a note saying how it is met"
has "$WORK/ref.out" "global_step=1240" "it trains the ten epochs"
REF=$(value final_digest "$WORK/ref.out")
CHECKS=$((CHECKS + 1))
ls output/checkpoint >"$WORK/ls"
if [ "$(tr '\n' ' ' <"$WORK/ls")" = "iteration_00000500 iteration_00001000 iteration_00001240 latest_checkpointed_iteration.txt " ]; then
    pass "saves every 500 steps (save_checkpoint_steps) and at the end, into save_dir"
else
    fail "save_dir holds: $(tr '\n' ' ' <"$WORK/ls")"
fi
has <(ls output/checkpoint/iteration_00000500) "llama2_7b_resume-model-0000000-0000001.safetensors" \
    "file names carry the CheckpointMonitor's prefix"
expect 0 "the saves verify" "$SHS_BIN" verify output/checkpoint

# the same command, killed with SIGKILL once it committed a save, restarted
cd "$WORK/job"
"$TRAINER" --config "$Y2" "${SMALL[@]}" >"$WORK/job1.out" 2>&1 &
PID=$!
for _ in $(seq 1 3000); do
    [ -s output/checkpoint/latest_checkpointed_iteration.txt ] && break
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.01
done
kill -9 "$PID" 2>/dev/null || true
wait "$PID" 2>/dev/null || true
PID=
has "$WORK/job1.out" "starting from scratch" "the killed first run had started fresh"
expect 0 "the restart (same command)" "$TRAINER" --config "$Y2" "${SMALL[@]}"
cp "$WORK/out" "$WORK/job2.out"
has "$WORK/job2.out" "resumed from ./output/checkpoint/iteration_" "the restart resumes from the job's own folder"
has "$WORK/job2.out" "final_digest=$REF" "and ends bitwise equal to the uninterrupted run"
expect 0 "every later restart resumes too" "$TRAINER" --config "$Y2" "${SMALL[@]}"
has "$WORK/out" "resumed from ./output/checkpoint/iteration_00001240 (step 1240)" "resumed from the final step"
has "$WORK/out" "final_digest=$REF" "nothing retrained"
# flags override the file: --steps wins over train: epochs (and says so)
expect 0 "--steps with train: epochs" "$TRAINER" --config "$Y2" "${SMALL[@]}" --steps 1300
has "$WORK/out" "note: train: epochs 10 is overridden by the step count: 1300 steps" "--steps overrides epochs, said"

# keys nobody reads are refused, naming the file, line and key
# refused NAME WHAT MESSAGE: the trainer exits 1 on $WORK/NAME.yaml saying MESSAGE
refused() {
    expect 1 "$2" "$TRAINER" --config "$WORK/$1.yaml" "${SMALL[@]}"
    has "$WORK/err" "$3" "$2: refused, with the reason"
}
sed 's/^  batch_size: 8$/  batch_size: 8\n  lr: 0.1/' "$Y2" >"$WORK/lr.yaml"
refused lr "a train: key the trainer does not read" \
    "lr.yaml:7: train: lr: not a checkpoint setting, and this program does not read it: the demo trainers read epochs, batch_size, steps and seed there"
sed 's/^  model_name: llama2_7b$/  model_name: llama2_7b\n  hidden_size: 4096/' "$Y2" >"$WORK/hs.yaml"
refused hs "a model: key that would change the model" \
    "hs.yaml:4: model: hidden_size: not read by this program: the demo's model (tinylm) is fixed"
printf 'runner_config:\n  epochs: 2\n' >"$WORK/rc.yaml"
refused rc "another top-level section" "rc.yaml:1: runner_config: not read by this program"
sed 's/^  epochs: 10$/  epochs: ten/' "$Y2" >"$WORK/ep.yaml"
refused ep "epochs must be a number" \
    "train: epochs: not a checkpoint setting, and this program does not read it: expected an integer >= 1, got 'ten'"
printf 'checkpoint:\n  save_path: x\n  strict_load: false\n' >"$WORK/sl.yaml"
refused sl "strict_load (MindSpore's name)" \
    "sl.yaml:3: unknown checkpoint field 'strict_load' (did you mean 'strict'?)"

# ---------------------------------------------------------------- 000
mkdir -p "$WORK/s000" && cd "$WORK/s000"
for f in save_basic save_async save_no_optim save_no_redundancy save_layout_cache; do
    rm -rf output
    expect 0 "seed 000 $f.yaml verbatim" "$TRAINER" --config "$FIX/000_$f.yaml" "${SMALL[@]}" --steps 1000
    CHECKS=$((CHECKS + 1))
    if [ "$(cat output/ckpt/latest_checkpointed_iteration.txt 2>/dev/null)" = 1000 ]; then
        pass "$f: saved step 1000 (save_interleaved_steps 1000) into ./output/ckpt"
    else
        fail "$f: ./output/ckpt: $(ls output/ckpt 2>&1 | tr '\n' ' ')"
    fi
    expect 0 "$f: the save verifies" "$SHS_BIN" verify output/ckpt
done
if ls output/ckpt/iteration_00001000/*-opt-* >/dev/null 2>&1; then
    pass "a full save holds optimizer state"; else fail "no optimizer file in a full save"; fi
CHECKS=$((CHECKS + 1))
rm -rf output
expect 0 "seed 000 save_no_optim.yaml" "$TRAINER" --config "$FIX/000_save_no_optim.yaml" "${SMALL[@]}" --steps 1000
CHECKS=$((CHECKS + 1))
if ls output/ckpt/iteration_00001000/*-opt-* >/dev/null 2>&1; then
    fail "no_save_optim: an optimizer file was saved"; else pass "no_save_optim: no optimizer state saved"; fi
expect 0 "seed 000 save_disabled.yaml (enable_save: False)" "$TRAINER" --config "$FIX/000_save_disabled.yaml" \
    "${SMALL[@]}" --steps 20 --save-path "$WORK/s000/nosave"
lacks "$WORK/out" "last save:" "enable_save: False saves nothing"
CHECKS=$((CHECKS + 1))
[ ! -e "$WORK/s000/nosave" ] && pass "and creates no save path" || fail "enable_save: False created $WORK/s000/nosave"
# loads: a full save at step 1000, named as the seed names it
rm -rf output pretrained
expect 0 "a full save to load from" "$TRAINER" --config "$FIX/000_save_basic.yaml" "${SMALL[@]}" --steps 1000
cp "$WORK/out" "$WORK/s1000.out"
S1000=$(value final_digest "$WORK/s1000.out")
cp -r output/ckpt/iteration_00001000 output/ckpt/checkpoint_5000
mkdir -p pretrained && cp -r output/ckpt pretrained/ckpt
for f in load_resume load_balanced; do
    expect 0 "seed 000 $f.yaml verbatim" "$TRAINER" --config "$FIX/000_$f.yaml" "${SMALL[@]}" --steps 1000
    has "$WORK/out" "resumed from ./output/ckpt/checkpoint_5000 (step 1000)" "$f: resumes the step directory with its optimizer state"
    has "$WORK/out" "final_digest=$S1000" "$f: the state is the saved one"
    has "$WORK/out" "note: no save path" "$f: no save_path in the file: it says it will not save"
done
expect 0 "seed 000 load_weights.yaml verbatim" "$TRAINER" --config "$FIX/000_load_weights.yaml" "${SMALL[@]}" --steps 30
has "$WORK/out" "initialised from ./pretrained/ckpt/iteration_00001000 (saved at step 1000, weights only): training starts at step 0" \
    "no_load_optim: weights only, training starts over"
has "$WORK/out" "global_step=30" "thirty steps from the loaded weights"
# the full example: save every 1000 steps, stop, resume at 2000 with load_path
expect 0 "seed 000 example, step 1 (save)" "$TRAINER" --config "$FIX/000_example_save.yaml" "${SMALL[@]}" --steps 2000
has <(ls checkpoints) "iteration_00001000" "checkpoints/iteration_00001000"
has <(ls checkpoints) "iteration_00002000" "checkpoints/iteration_00002000"
expect 0 "seed 000 example, step 3 (load_path: ./checkpoints)" "$TRAINER" --config "$FIX/000_example_load.yaml" \
    "${SMALL[@]}" --steps 2003 --log-every 1
has "$WORK/out" "resumed from ./checkpoints/iteration_00002000 (step 2000)" "global_step = 2000 after the load"
has "$WORK/out" "step 2001 loss" "training goes on 2000 -> 2001 -> 2002 -> ..."

# ---------------------------------------------------------------- torchtitan
mkdir -p "$WORK/tt" && cd "$WORK/tt"
expect 0 "a checkpoint to ignore" "$TRAINER" "${SMALL[@]}" --steps 30 --save-path ck --save-interval 10
printf 'checkpoint:\n  enable: false\n  folder: ck\n  interval: 10\n  initial_load_path: ck\n' >off.yaml
expect 0 "torchtitan enable: false" "$TRAINER" --config off.yaml "${SMALL[@]}" --steps 40
has "$WORK/out" "starting from scratch: checkpointing is disabled (enable: false): nothing loaded, nothing saved" \
    "enable: false loads nothing, even with a checkpoint in its folder"
CHECKS=$((CHECKS + 1))
[ "$(cat ck/latest_checkpointed_iteration.txt)" = 30 ] && [ ! -e ck/iteration_00000040 ] &&
    pass "and saves nothing" || fail "enable: false saved: $(ls ck | tr '\n' ' ')"
printf 'checkpoint:\n  enable: true\n  folder: missing\n  load_step: 500\n' >ls.yaml
expect 1 "load_step with an empty folder" "$TRAINER" --config ls.yaml "${SMALL[@]}" --steps 40
has "$WORK/err" "load_step 500: save_path 'missing' holds no checkpoint" "load_step that cannot be honoured is an error"
printf 'checkpoint:\n  load_step: 25\n' >ls2.yaml
expect 1 "load_step with no folder at all" "$TRAINER" --config ls2.yaml "${SMALL[@]}" --steps 40
has "$WORK/err" "load_step 25: there is no save_path or load_path to load it from" "never a fresh start"
finish
