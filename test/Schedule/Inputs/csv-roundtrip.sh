#!/usr/bin/env bash
# Export each kind as PyTorch CSV, import it, export again: the per-rank
# orders must not change (DualPipe's and Chimera's two copies are
# recognised by their GRADREDUCE cells).
set -euo pipefail
tools=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
n=0
for k in gpipe 1f1b interleaved zb-h1 zb-h2 zbv dualpipe dualpipev chimera; do
  "$tools/pipeforge-sched" --schedule "$k" --ranks 4 --microbatches 8 --format csv > "$dir/a.csv"
  "$tools/pipeforge-sched" --import-csv "$dir/a.csv" --format csv > "$dir/b.csv"
  cmp -s "$dir/a.csv" "$dir/b.csv" || echo "$k differs"
  n=$((n + 1))
done
echo "$n kinds round-trip"
