#!/usr/bin/env bash
# PipeForge set-up: installs every package the project needs from Debian.
# `--bench` installs the benchmark-only PyTorch instead (below).
# Idempotent: when everything is present it prints one line and exits 0.
set -euo pipefail

# --bench: the benchmark-only PyTorch (never needed by the build): torch and
# numpy in a virtual environment outside the repository, the same one the
# torch tests use (scripts/setup-torch.sh; PIPEFORGE_TORCH_VENV picks its
# folder, default ~/.cache/pipeforge/torch-venv), where
# benchmarks/peer_pytorch.py finds it.
if [ "${1:-}" = "--bench" ]; then
  exec bash "$(dirname "$0")/setup-torch.sh"
fi

PACKAGES=(
  # LLVM / MLIR 22
  llvm-22-dev libmlir-22-dev mlir-22-tools llvm-22-tools clang-22 lld-22
  # libFuzzer + ASan/UBSan runtimes for clang-22 (scripts/fuzz.sh)
  libclang-rt-22-dev
  # build
  cmake ninja-build ccache g++ pkg-config python3
  # runtime
  libopenmpi-dev openmpi-bin libopenblas-dev
  # the CPU backend's float GEMM (oneDNN's JIT sgemm; OpenBLAS without it)
  libdnnl-dev
  # schedule solver, formats
  coinor-libcbc-dev nlohmann-json3-dev
  # pipeforge-tokenize --tokenizer x.model (SentencePiece; optional: without
  # it that one mode reports that it is not built)
  libsentencepiece-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "setup: installing ${#missing[@]} package(s): ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "setup: error: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
if ! $SUDO apt-get update -qq >/tmp/pipeforge-setup.log 2>&1; then
  echo "setup: error: apt-get update failed (see /tmp/pipeforge-setup.log)" >&2
  tail -5 /tmp/pipeforge-setup.log >&2
  exit 1
fi
if ! $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >>/tmp/pipeforge-setup.log 2>&1; then
  echo "setup: error: could not install some of: ${missing[*]}" >&2
  grep -E "^E:" /tmp/pipeforge-setup.log >&2 || tail -5 /tmp/pipeforge-setup.log >&2
  exit 1
fi
echo "setup: done"
