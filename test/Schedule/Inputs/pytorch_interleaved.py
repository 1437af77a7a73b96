"""The compute order of PyTorch's ScheduleInterleaved1F1B, as its CSV.

A transcription of torch/distributed/pipelining/schedules.py
(ScheduleInterleaved1F1B.__init__ and _calculate_single_rank_operations,
_get_warmup_ops with multiply_factor 2, and _get_1f1b_rank_ops without zero
bubble), for a test oracle that needs no PyTorch install: one row per rank,
the rank's actions in order ("<stage>F<mb>", "<stage>B<mb>"), the idle
slots PyTorch pads with None left out.

    pytorch_interleaved.py RANKS MICROBATCHES CHUNKS
"""
import sys
from collections import defaultdict


def rank_ops(rank, p, m, v):
    rounds = max(1, m // p)
    per_round = m // rounds
    if m % rounds != 0:
        sys.exit(f"PyTorch refuses {m} microbatches for {p} ranks "
                 f"({rounds} rounds)")
    warmup = min((v - 1) * per_round + 2 * ((p - 1) - rank), m * v)
    microbatch_ops = v * m
    fwd_bwd = microbatch_ops - warmup
    cooldown = microbatch_ops - fwd_bwd
    total = warmup + fwd_bwd + cooldown

    def forward_stage(step):
        return ((step // per_round) % v) * p + rank

    def backward_stage(step):
        return (v - 1 - ((step - warmup) // per_round) % v) * p + rank

    fwd_mb, bwd_mb = defaultdict(int), defaultdict(int)
    ops = []
    for op in range(total):
        if op < warmup:
            s = forward_stage(op)
            ops.append(f"{s}F{fwd_mb[s]}")
            fwd_mb[s] += 1
        elif op < warmup + fwd_bwd:
            s = forward_stage(op)
            ops.append(f"{s}F{fwd_mb[s]}")
            fwd_mb[s] += 1
            s = backward_stage(op)
            ops.append(f"{s}B{bwd_mb[s]}")
            bwd_mb[s] += 1
        else:
            s = backward_stage(op)
            ops.append(f"{s}B{bwd_mb[s]}")
            bwd_mb[s] += 1
    return ops


p, m, v = (int(a) for a in sys.argv[1:4])
for r in range(p):
    print(",".join(rank_ops(r, p, m, v)))
