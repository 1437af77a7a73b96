#!/usr/bin/env bash
# Packs what scripts/gpu-check.sh needs on a GPU machine that cannot build
# the project (no LLVM/MLIR, no Debian packages, no network): the runtime
# binaries built here (CUDA code for sm_75..sm_90), the shared libraries
# they load that such a machine may lack (OpenBLAS, Open MPI's libmpi, ...;
# not glibc and not the CUDA libraries, which the GPU machine has), and the
# tiny GPT compiled for the reference and every schedule.
#   bash scripts/gpu-bundle.sh [OUT_DIR]   (default: gpu-bundle)
# writes OUT_DIR/ and OUT_DIR.tar.xz (about 16 MB; the folder is about 110 MB,
# 40 of them oneDNN).
# On the GPU machine, from a checkout of the same commit:
#   GPU_BUNDLE=gpu-bundle.tar.xz bash scripts/gpu-check.sh
# BUILD_DIR (default build) must hold a build with CUDA enabled.
# GPU_BUNDLE_NO_BUILD=1: take the binaries as they are (no ninja);
# GPU_BUNDLE_TAR=0: the folder only (test/Runtime/gpu-check-dry-run.test).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
out=${1:-gpu-bundle}
bin=$BUILD_DIR/bin
tools=(pipeforge-run CudaBackendTests CudaMathTests cuda_gemm)

[ "${GPU_BUNDLE_NO_BUILD:-0}" = 1 ] || ninja -C "$BUILD_DIR" pipeforge-compile "${tools[@]}" >/dev/null
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/lib-fallback" "$out/programs"
for t in "${tools[@]}"; do
  strip -o "$out/bin/$t" "$bin/$t"
done

# Libraries: everything the binaries load except glibc's own, the C++
# runtime (kept apart: used only where the machine's is older) and CUDA's.
skip='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libcuda|libcudart|libcublas|libcublasLt|libnccl)\.'
for t in "${tools[@]}"; do
  ldd "$bin/$t" | awk '$3 ~ /^\// { print $1, $3 }'
done | sort -u | while read -r name path; do
  if [[ "$name" =~ ^(libstdc\+\+|libgcc_s)\. ]]; then
    cp -L "$path" "$out/lib-fallback/$name"
  elif ! [[ "$name" =~ $skip ]]; then
    cp -L "$path" "$out/lib/$name"
  fi
done

# Programs: the same settings as gpu-check.sh compiles.
common=(--microbatches 8 --seq-len 32)
"$bin/pipeforge-compile" examples/gpt-tiny.json --schedule none --ranks 1 "${common[@]}" \
  -o "$out/programs/ref.pfp" >/dev/null
for sched in gpipe 1f1b interleaved zb-h1 zb-h2 zbv dualpipe dualpipev; do
  "$bin/pipeforge-compile" examples/gpt-tiny.json --schedule "$sched" --ranks 4 "${common[@]}" \
    -o "$out/programs/$sched.pfp" >/dev/null
done
"$bin/pipeforge-compile" examples/gpt-tiny.json --schedule 1f1b --ranks 2 "${common[@]}" \
  -o "$out/programs/1f1b-2.pfp" >/dev/null
# The tiny DeepSeek (MLA + MoE): the reference and the schedules gpu-check.sh runs.
"$bin/pipeforge-compile" examples/deepseek-tiny.json --schedule none --ranks 1 "${common[@]}" \
  -o "$out/programs/ds-none-1.pfp" >/dev/null
for sr in 1f1b:4 zb-h1:2 dualpipev:2; do
  "$bin/pipeforge-compile" examples/deepseek-tiny.json --schedule "${sr%:*}" --ranks "${sr#*:}" \
    "${common[@]}" -o "$out/programs/ds-${sr%:*}-${sr#*:}.pfp" >/dev/null
done
# The other parallel dimensions gpu-check.sh runs: data parallelism (the
# overlapped gradient reduction), expert and tensor parallelism on DeepSeek.
"$bin/pipeforge-compile" examples/gpt-tiny.json --schedule 1f1b --ranks 2 --dp 2 "${common[@]}" \
  -o "$out/programs/1f1b-dp2.pfp" >/dev/null
"$bin/pipeforge-compile" examples/gpt-tiny.json --schedule 1f1b --ranks 2 --dp 2 --zero 3 "${common[@]}" \
  -o "$out/programs/1f1b-dp2-z3.pfp" >/dev/null
"$bin/pipeforge-compile" examples/deepseek-tiny.json --schedule dualpipev --ranks 2 --ep 2 --fuse-overlap \
  "${common[@]}" -o "$out/programs/ds-dualpipev-ep2.pfp" >/dev/null
"$bin/pipeforge-compile" examples/deepseek-tiny.json --schedule 1f1b --ranks 2 --tp 2 --sequence-parallel \
  "${common[@]}" -o "$out/programs/ds-1f1b-tp2.pfp" >/dev/null
git rev-parse HEAD >"$out/COMMIT" 2>/dev/null || true
if [ "${GPU_BUNDLE_TAR:-1}" = 0 ]; then
  echo "gpu-bundle: $out: $(ls "$out/bin" | tr '\n' ' ')"
  exit 0
fi
tar cJf "$out.tar.xz" -C "$(dirname "$out")" "$(basename "$out")"
echo "gpu-bundle: $out.tar.xz ($(du -h "$out.tar.xz" | cut -f1)): $(ls "$out/bin" | tr '\n' ' ')"
