# zero-share.awk BASE.log ZERO.log: the memory report's optimizer-state
# bytes per world rank, without and with --zero 1 (pp2 x dp2: world ranks
# r and r + 2 are the replicas of pipeline rank r). The replicas' shares
# must add up to the unsharded bytes; prints the largest share.
/: parameters .* optimizer state / {
  r = $2; sub(":", "", r)
  for (i = 1; i <= NF; ++i) if ($i == "state") b = $(i + 1)
  if (FNR == NR) base[r] = b; else zero[r] = b
}
END {
  worst = 0
  for (p = 0; p < 2; ++p) {
    sum = zero[p] + zero[p + 2]
    share = zero[p] > zero[p + 2] ? zero[p] : zero[p + 2]
    share /= base[p]
    if (share > worst) worst = share
    printf "pipeline rank %d: replicas hold %d + %d = %d bytes, unsharded %d: %s, largest share %.3f\n",
      p, zero[p], zero[p + 2], sum, base[p], (sum == base[p] ? "OK" : "MISMATCH"), share
  }
  print "largest share below 0.6: " (worst < 0.6 ? "OK" : "NO (" worst ")")
}
