#!/usr/bin/env bash
# pipeforge-sched's simulated makespan, bubble and per-rank peak for V-Half,
# V-Min, ZB-V and 1F1B under uniform and non-uniform F/B/W costs.
#   scripts/controllable-table.sh path/to/pipeforge-sched
# docs/schedules/controllable-memory.md shows it (gen-schedule-docs.sh) and
# test/Schedule/controllable.test checks it.
set -euo pipefail
sched=$1
row() { # kind ranks microbatches options... -> "makespan|bubble_rate|peak M_B"
  local kind=$1 p=$2 m=$3
  shift 3
  "$sched" --schedule "$kind" --ranks "$p" --microbatches "$m" "$@" | awk '
    /^makespan/ { ms = $2; br = $4 }
    /^rank [0-9]+: busy/ { if ($8 > pk) pk = $8 }
    END { printf "%.1f|%.4f|%.1f", ms, br, pk }'
}
echo "| costs T_F : T_B : T_W | p | m | schedule | makespan | bubble | peak (M_B) | peak (chunk units) |"
echo "|---|---|---|---|---|---|---|---|"
for costs in "1 1 1" "1 2 1" "1 1.5 0.5" "2 2 1"; do
  read -r tf tb tw <<<"$costs"
  for pm in "4 8" "4 16" "6 12"; do
    read -r p m <<<"$pm"
    for k in 1f1b zbv v-half v-min; do
      IFS='|' read -r ms br pk <<<"$(row $k $p $m --tf $tf --tb $tb --tw $tw)"
      units=$(awk -v x="$pk" 'BEGIN { printf "%g", 2 * x }')
      echo "| $tf : $tb : $tw | $p | $m | $k | $ms | $br | $pk | $units |"
    done
  done
done
