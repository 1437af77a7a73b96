#!/usr/bin/env bash
# For every kind: pipeforge-sched's text peaks and its JSON peaks, compared.
set -euo pipefail
tools=$1
n=0
for kind in gpipe 1f1b interleaved zb-h1 zb-h2 zbv dualpipe dualpipev chimera v-half v-min auto; do
  args=(--schedule "$kind" --ranks 4 --microbatches 8)
  [ "$kind" = auto ] && args+=(--mem-limit 4 --search-limit 0)
  text=$("$tools/pipeforge-sched" "${args[@]}" | sed -n 's/.*peak_activation \([0-9.]*\) M_B.*/\1/p' |
    awk '{ printf "%.4f ", $1 }')
  json=$("$tools/pipeforge-sched" "${args[@]}" --format json |
    python3 -c 'import json, sys; print(" ".join("%.4f" % v for v in json.load(sys.stdin)["summary"]["peak_activation"]), end=" ")')
  if [ "$text" != "$json" ]; then echo "DIFFER $kind: text [$text] json [$json]"; fi
  n=$((n + 1))
done
echo "checked $n kinds"
