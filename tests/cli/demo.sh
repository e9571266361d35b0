#!/usr/bin/env bash
# demo.sh -- scripts/demo.sh as a new user runs it, on the tree's build:
# it shows the build's progress (not minutes of silence), then trains,
# is killed, resumes bitwise identical, and inspects what it saved.
. "$(dirname "$0")/lib.bash"

: "${SHS_BUILD_DIR:?SHS_BUILD_DIR must name the build directory}"
expect 0 "scripts/demo.sh" env SHS_DEMO_SKIP_SETUP=1 SHS_DEMO_BUILD_DIR="$SHS_BUILD_DIR" \
    SHS_DEMO_STEPS=300 bash "$SHS_SOURCE_DIR/scripts/demo.sh"
has "$WORK/out" "== 0. setup and build" "it says it builds"
has "$WORK/out" "build: 100%" "it shows the build's progress"
has "$WORK/out" "build: done" "and when the build is done"
has "$WORK/out" "resumed run is bitwise identical" "the killed run resumes bitwise identical"
has "$WORK/out" "demo: done" "the demo ends"
finish
