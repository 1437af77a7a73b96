#!/usr/bin/env python3
"""Launch modes of the same pipelined program, measured in one run.

For each schedule it compiles examples/gpt-tiny.json for RANKS ranks and
trains it with
  mpi          mpirun -np RANKS pipeforge-run (processes, MPI messages)
  threads      pipeforge-run --local-ranks RANKS (threads, copies)
  cpu-device   the same threads on the cpu-device backend (device-style
               buffers: host-staged parameters, copies for every message)
  cuda         --local-ranks on the CUDA backend (only where a GPU answers)
and prints tokens/s (mean of the steps after the first) and the ratio to
mpi. Timings here are noisy: compare the ratios of one run.

  python3 benchmarks/local_ranks.py [--ranks 4] [--steps 6]
      [--schedules 1f1b,zb-h1,zbv,dualpipev] [--build build]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile


def tokens_per_s(log):
    vals = [float(l.split()[5]) for l in log.splitlines() if l.startswith("step ")]
    vals = vals[1:] or vals
    return sum(vals) / len(vals) if vals else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--schedules", default="1f1b,zb-h1,zbv,dualpipev")
    ap.add_argument("--build", default="build")
    a = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    bin_dir = os.path.join(root, a.build, "bin")
    run = os.path.join(bin_dir, "pipeforge-run")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    have_gpu = shutil.which("nvidia-smi") is not None and subprocess.run(
        ["nvidia-smi", "-L"], capture_output=True).returncode == 0
    modes = [("mpi", None), ("threads", []), ("cpu-device", ["--backend", "cpu-device"])]
    if have_gpu:
        modes.append(("cuda", ["--backend", "cuda"]))
    work = tempfile.mkdtemp(prefix="pf-local-ranks-")
    print(f"gpt-tiny, {a.ranks} ranks, 8 microbatches, {a.steps} steps; tokens/s (ratio to mpi)")
    print(f"{'schedule':12}" + "".join(f"{m:>22}" for m, _ in modes))
    for sched in a.schedules.split(","):
        prog = os.path.join(work, sched + ".pfp")
        subprocess.run([os.path.join(bin_dir, "pipeforge-compile"),
                        os.path.join(root, "examples", "gpt-tiny.json"), "--schedule", sched,
                        "--ranks", str(a.ranks), "--microbatches", "8", "--seq-len", "32",
                        "-o", prog], check=True, capture_output=True)
        row, base = f"{sched:12}", None
        for name, extra in modes:
            if extra is None:
                cmd = ["mpirun", "--oversubscribe", "-np", str(a.ranks), run, prog]
            else:
                cmd = [run, prog, "--local-ranks", str(a.ranks)] + extra
            out = subprocess.run(cmd + ["--steps", str(a.steps)], env=env,
                                 capture_output=True, text=True)
            if out.returncode != 0:
                row += f"{'FAIL':>22}"
                print(out.stderr, file=sys.stderr)
                continue
            t = tokens_per_s(out.stdout)
            base = base or t
            row += f"{t:>14.0f} ({t / base:4.2f})"
        print(row)
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
