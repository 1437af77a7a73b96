# Reads pipeforge-plan's table output with --explain and checks the
# published-run criteria (docs/planner.md, "Published runs"):
#   awk -v metric=tokens|tflops -v lo=LO -v hi=HI -f published-check.awk
# prints
#   published setup: predicted X tokens/s|model TFLOP/s per GPU, range [LO, HI]: within|OUTSIDE
#   published setup fits: yes|NO
#   recommendation: step R ms against the published setup's P ms: at least as fast|SLOWER
#   recommendation fits: yes|NO
# The numbers come from the planner; only the bounds are given here.
function after(line, word,    i, n, f) {
  n = split(line, f, " ")
  for (i = 1; i < n; ++i)
    if (f[i] == word)
      return f[i + 1]
  return ""
}
function before(line, word,    i, n, f) {
  n = split(line, f, " ")
  for (i = 2; i <= n; ++i)
    if (f[i] == word)
      return f[i - 1]
  return ""
}
/^recommended: / {
  usable = after($0, "(of")
  recMem = before($0, "GiB")
}
/^explain: / {
  step = after($0, "step")
  pubFits = "NO"
  if ($0 ~ /, fits\)/)
    pubFits = "yes"
  if (metric == "tflops")
    value = before($0, "model")
  else
    value = before($0, "tokens/s,")
}
/^  recommendation: / { recStep = after($0, "step") }
/^  it is the recommendation/ { recStep = step }
END {
  if (value == "" || step == "" || recStep == "") {
    print "published-check: missing explain or recommendation lines"
    exit 1
  }
  inRange = "OUTSIDE"
  if (value + 0 >= lo + 0 && value + 0 <= hi + 0)
    inRange = "within"
  asFast = "SLOWER"
  if (recStep + 0 <= step + 0)
    asFast = "at least as fast"
  fits = "NO"
  if (recMem + 0 <= usable + 0)
    fits = "yes"
  label = "tokens/s"
  if (metric == "tflops")
    label = "model TFLOP/s per GPU"
  printf "published setup: predicted %s %s, range [%s, %s]: %s\n", value, \
         label, lo, hi, inRange
  printf "published setup fits: %s\n", pubFits
  printf "recommendation: step %s ms against the published setup's %s ms: %s\n", \
         recStep, step, asFast
  printf "recommendation fits: %s\n", fits
}
