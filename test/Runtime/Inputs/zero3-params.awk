# zero3-params.awk LOG: the memory report of a --zero 3 run. Between steps
# each rank holds the values of exactly the tensors it updates (their AdamW
# state is m and v: twice those bytes), and during the step, between a
# stage's UNSHARD and RESHARD, the whole stage (its peak equals the
# gradients' peak, the whole buffer).
/: parameters .* \(peak .* gradients .* \(peak / {
  r = $2; sub(":", "", r)
  n = 0
  for (i = 1; i <= NF; ++i) {
    if ($i == "parameters") p = $(i + 1)
    if ($i == "(peak") { k[n] = $(i + 1); sub(")", "", k[n]); sub(",", "", k[n]); ++n }
    if ($i == "state") s = $(i + 1)
  }
  printf "rank %s: parameters held %s = state / 2: %s, peak = gradients' peak: %s, held below 0.6 of peak: %s\n",
         r, p, (2 * p == s ? "OK" : "NO (" s ")"), (k[0] == k[1] ? "OK" : "NO (" k[0] " vs " k[1] ")"),
         (p < 0.6 * k[0] ? "OK" : "NO")
}
