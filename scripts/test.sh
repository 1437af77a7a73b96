#!/usr/bin/env bash
# Configure, build, and run every test suite (lit + GoogleTest); print one
# summary line "N passed, N failed" and exit non-zero on any failure.
#   BUILD_DIR (default: build)  JOBS (default: nproc)
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}

linker=()
command -v ld.lld >/dev/null 2>&1 && linker=(-DLLVM_USE_LINKER=lld)

mkdir -p "$BUILD_DIR"
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja "${linker[@]}" >"$BUILD_DIR/configure.log" 2>&1 || {
    echo "test: configure failed:"; tail -30 "$BUILD_DIR/configure.log"; exit 1; }
fi
if ! ninja -C "$BUILD_DIR" -j "$JOBS" >"$BUILD_DIR/build.log" 2>&1; then
  echo "test: build failed:"; grep -E "error|FAILED" -A3 "$BUILD_DIR/build.log" | head -60; exit 1
fi

results="$(pwd)/$BUILD_DIR/test-results"
rm -rf "$results"; mkdir -p "$results"

status=0
# lit: the tools, passes and diagnostics.
lit_bin=$(grep -E '^LLVM_EXTERNAL_LIT:' "$BUILD_DIR/CMakeCache.txt" | cut -d= -f2)
"${lit_bin:-lit}" -q --xunit-xml-output "$results/lit.xml" "$BUILD_DIR/test" || status=1
# GoogleTest via ctest.
(cd "$BUILD_DIR" && ctest --output-on-failure -j "$JOBS" >"$results/ctest.log" 2>&1) || {
  status=1; grep -E "Failed|FAILED|error" "$results/ctest.log" | head -40; }

python3 - "$results" <<'PY'
import glob, sys, xml.etree.ElementTree as ET
passed = failed = skipped = 0
for f in glob.glob(sys.argv[1] + "/*.xml"):
    for case in ET.parse(f).getroot().iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        elif case.find("skipped") is not None or case.get("status") == "notrun":
            skipped += 1
        else:
            passed += 1
print(f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
PY
exit $status
