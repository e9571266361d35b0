#!/usr/bin/env bash
# Install what shardsafe needs to build, test and demo on Debian 12.
# Idempotent: packages already present are skipped.  Run as root (or with
# sudo available).  `--bench` also installs what the benchmarks compare to.
set -euo pipefail

# libssl-dev: nothing links libcrypto yet; the planned checkpoint
# encryption will.  clang-format: the house style (.clang-format).
pkgs=(build-essential cmake pkg-config git
      libxxhash-dev libjansson-dev libyaml-dev libssl-dev libcmocka-dev
      clang clang-format libclang-rt-14-dev python3 python3-numpy time
      libopenmpi-dev openmpi-bin
      python3-dev python3-venv python3-setuptools python3-wheel python3-pytest
      python3-torch python3-mpi4py
      libprotobuf-c-dev protobuf-c-compiler)
# s3:// save paths (docs/s3.md): libcurl for the S3 client; Ceph's monitor,
# OSD and radosgw (scripts/s3-server.sh) for the real S3 server the tests
# run against; curl for its readiness probe and the benchmark's baseline.
pkgs+=(libcurl4-openssl-dev curl ceph-mon ceph-osd radosgw ceph-common)
# python3-*: the Python binding (python/, docs/python.md): its build, its
# pytest suite and the pip install test; torch for shardsafe.torch.
# python3-fsspec: one test of the reference safetensors suite that
# python/tests/run_reference_tests.sh runs (docs/python.md).
pkgs+=(python3-fsspec)
# protobuf-c: MindSpore strategy files (src/tools/strategy.proto, compiled
# by protoc-c at build time).
if [[ "${1:-}" == "--bench" ]]; then
  pkgs+=(linux-perf hyperfine)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo_cmd=()
  [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
  echo "setup: installing ${missing[*]}"
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq \
    --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "setup: all packages present"
