#!/usr/bin/env python3
"""Time and peak memory of pipeforge-sched on schedules of millions of actions.

Runs each command with /usr/bin/time -v, writes the output to a scratch
file, and prints a table: wall seconds, peak RSS (MB), output size (MB),
actions (compute + messages, from the CSV row count where cheap: the
formula 2 ranks x 2 stages x 3 x m + 8 m for ZB-V on 2 ranks), and bytes
of peak RSS per action. Issue 31 item 3's target: 1,000,000 microbatches
on 2 ranks under 3 s and 1 GB.

    large_schedule.py [--sched build/bin/pipeforge-sched] [--microbatches 1000000]
                      [--formats text,csv,json] [--compute-only] [--auto]

--compute-only adds the runs without messages; --auto adds the automatic
scheduler under `--time-limit 2`, which bounds the whole command (it fails
with an error, rc 1, where the command does not fit).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile


def run(cmd):
    with tempfile.NamedTemporaryFile(delete=False) as out:
        path = out.name
    p = subprocess.run(["/usr/bin/time", "-v"] + cmd + ["-o", path],
                       capture_output=True, text=True)
    size = os.path.getsize(path) if os.path.exists(path) else 0
    if os.path.exists(path):  # a --time-limit stop removes it
        os.unlink(path)
    if p.returncode != 0:
        err = [l for l in p.stderr.splitlines() if "error:" in l]
        print("   ", err[0] if err else p.stderr.strip()[:200], file=sys.stderr)
    wall = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", p.stderr)
    secs = 0.0
    if wall:
        h, m, s = wall.groups()
        secs = int(h or 0) * 3600 + int(m) * 60 + float(s)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
    cpu = sum(float(x) for x in re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", p.stderr))
    return p.returncode, secs, cpu, int(rss.group(1)) / 1024 if rss else 0, size / 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sched", default="build/bin/pipeforge-sched")
    ap.add_argument("--microbatches", type=int, default=1000000)
    ap.add_argument("--formats", default="text,csv,json")
    ap.add_argument("--compute-only", action="store_true")
    ap.add_argument("--auto", action="store_true")
    a = ap.parse_args()
    m = a.microbatches
    actions = 2 * 2 * 3 * m + 8 * m  # ZB-V, 2 ranks: compute + send/recv
    # CPU s (user + system) depends less on the machine's load than wall s.
    print(f"{'command':<58} {'rc':>3} {'wall s':>7} {'CPU s':>6} {'peak MB':>8} {'out MB':>7} {'B/action':>9}")
    for fmt in a.formats.split(","):
        for extra in ([], ["--compute-only"])[:2 if a.compute_only else 1]:
            cmd = [a.sched, "--schedule", "zbv", "--ranks", "2", "--microbatches",
                   str(m), "--format", fmt] + extra
            rc, secs, cpu, mb, out = run(cmd)
            n = actions if not extra else 2 * 2 * 3 * m
            label = " ".join(cmd[1:])
            print(f"{label:<58} {rc:>3} {secs:>7.2f} {cpu:>6.2f} {mb:>8.0f} {out:>7.1f} {mb * 2**20 / n:>9.0f}")
    if a.auto:
        cmd = [a.sched, "--schedule", "auto", "--ranks", "2", "--microbatches",
               str(m), "--time-limit", "2"]
        rc, secs, cpu, mb, out = run(cmd)
        label = " ".join(cmd[1:])
        print(f"{label:<58} {rc:>3} {secs:>7.2f} {cpu:>6.2f} {mb:>8.0f} {out:>7.1f} {mb * 2**20 / actions:>9.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
