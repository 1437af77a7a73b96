# zero-pair.awk BASE.log ZERO.log: the memory report's optimizer-state
# bytes per rank without and with --zero 1 on a two-copy schedule
# (DualPipe, Chimera; dp 1). Each rank must keep at most 0.6 of its
# unsharded state (tied tensors stay on both sides of the pair), and the
# whole run about half.
/: parameters .* optimizer state / {
  r = $2; sub(":", "", r)
  for (i = 1; i <= NF; ++i) if ($i == "state") b = $(i + 1)
  if (FNR == NR) base[r] = b; else zero[r] = b
}
END {
  worst = 0; tb = 0; tz = 0
  for (r in base) {
    share = zero[r] / base[r]
    if (share > worst) worst = share
    tb += base[r]; tz += zero[r]
  }
  printf "largest share below 0.6: %s\n", (worst < 0.6 ? "OK" : "NO (" worst ")")
  printf "whole run: %.2f of the unsharded state\n", tz / tb
}
