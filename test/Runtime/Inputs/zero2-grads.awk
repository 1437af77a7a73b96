# zero2-grads.awk LOG: the memory report of a --zero 2 run. Between steps
# each rank holds the gradients of exactly the tensors whose AdamW state it
# holds (the state is m and v: twice those bytes), and during the step the
# whole gradient buffer (its peak equals the parameter bytes).
/: parameters .* gradients .* \(peak / {
  r = $2; sub(":", "", r)
  for (i = 1; i <= NF; ++i) {
    if ($i == "parameters") p = $(i + 1)
    if ($i == "gradients") g = $(i + 1)
    if ($i == "(peak") { k = $(i + 1); sub(")", "", k); sub(",", "", k) }
    if ($i == "state") s = $(i + 1)
  }
  printf "rank %s: gradients held %s = state / 2: %s, peak = parameters: %s, held below 0.6 of peak: %s\n",
         r, g, (2 * g == s ? "OK" : "NO (" s ")"), (k == p ? "OK" : "NO (" k " vs " p ")"),
         (g < 0.6 * k ? "OK" : "NO")
}
