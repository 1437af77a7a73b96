#!/usr/bin/env bash
# The main job. Until the runtime exists: set up, build pipeforge-opt, and
# show the model and schedule IR of the examples.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  linker=(); command -v ld.lld >/dev/null 2>&1 && linker=(-DLLVM_USE_LINKER=lld)
  cmake -S . -B "$BUILD_DIR" -G Ninja "${linker[@]}" >/dev/null
fi
ninja -C "$BUILD_DIR" pipeforge-opt >/dev/null
for f in examples/*.mlir; do
  echo "== $f"
  "$BUILD_DIR/bin/pipeforge-opt" "$f"
done
