#!/usr/bin/env python3
"""The demo's pictures (scripts/demo.sh): the measured timeline of every rank
beside the simulator's, and the loss curve. Plain SVG, standard library only.

  demo_pictures.py TRACE.json TRAIN.log SIM.svg OUTDIR [--step K]

TRACE.json  pipeforge-run --trace (every rank's compute events, one
            "step K" event per rank and step)
TRAIN.log   pipeforge-run's output ("step K loss X tokens/s Y bubble Z")
SIM.svg     pipeforge-sched --format svg with the measured costs
OUTDIR      gets timeline.svg and loss.svg

The measured timeline shows one step (default: the last one) of every rank on
the ranks' common steady clock (each rank's events are relative to its epoch,
recorded in the trace's "clock" metadata).
"""
import json
import re
import sys
from html import escape

COLORS = {"F": "#4e79a7", "B": "#59a14f", "W": "#edc948", "BW": "#f28e2b",
          "FB": "#b07aa1"}


def kind_of(name):
    if "+" in name:  # an overlapped pair: "F0.3+BW3.1"
        return "FB"
    m = re.match(r"^(BW|F|B|W)", name)
    return m.group(1) if m else None


def measured_svg(trace_path, step=None, width=1600):
    events = json.load(open(trace_path))["traceEvents"]
    epoch = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "clock":
            epoch[e["pid"]] = e["args"]["epoch_us"]
    steps = {}
    for e in events:
        if e.get("ph") == "X" and e.get("tid") == 2 and e["name"].startswith("step "):
            k = int(e["name"].split()[1])
            steps.setdefault(k, {})[e["pid"]] = e
    if not steps:
        raise SystemExit("demo_pictures.py: no step events in " + trace_path)
    k = step if step is not None else max(steps)
    if k not in steps:
        raise SystemExit(f"demo_pictures.py: no step {k} in {trace_path}")
    ranks = sorted(epoch)
    absolute = lambda e: epoch.get(e["pid"], 0.0) + e["ts"]
    t0 = min(absolute(e) for e in steps[k].values())
    t1 = max(absolute(e) + e["dur"] for e in steps[k].values())
    span = max(t1 - t0, 1e-9)
    left, row, top = 64, 28, 44
    scale = (width - left - 16) / span
    busy = {r: 0.0 for r in ranks}
    boxes = []
    for e in events:
        if e.get("ph") != "X" or e.get("tid") != 0:
            continue
        kind = kind_of(e["name"])
        start = absolute(e)
        if kind is None or start < t0 or start + e["dur"] > t1 + 1:
            continue
        # As pipeforge-run counts it: a compute blocked on a receive waits,
        # and waiting is bubble.
        wait = e.get("args", {}).get("wait_us", 0.0)
        busy[e["pid"]] = busy.get(e["pid"], 0.0) + e["dur"] - wait
        x = left + (start - t0) * scale
        w = max(e["dur"] * scale, 0.5)
        y = top + ranks.index(e["pid"]) * row
        label = e["name"]
        boxes.append(
            f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{row - 6}" '
            f'fill="{COLORS[kind]}" stroke="white" stroke-width="0.5">'
            f'<title>{escape(e["name"])} {e["dur"] / 1000:.3f} ms</title></rect>')
        if w > 24:
            boxes.append(f'<text x="{x + 2:.2f}" y="{y + row - 12}" fill="white">'
                         f'{escape(label)}</text>')
    bubble = 1 - sum(busy.values()) / (len(ranks) * span)
    height = top + len(ranks) * row + 10
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="10">',
           '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="{left}" y="16" font-size="13">measured (pipeforge-run --trace), step {k}: '
           f'{span / 1000:.2f} ms, bubble {bubble * 100:.2f}%</text>']
    x = left
    for kind, label in [("F", "F"), ("B", "B (input grad)"), ("W", "W"),
                        ("BW", "BW (full backward)"), ("FB", "F&B overlapped")]:
        out.append(f'<rect x="{x}" y="24" width="10" height="10" fill="{COLORS[kind]}"/>'
                   f'<text x="{x + 13}" y="33">{escape(label)}</text>')
        x += 30 + 6 * len(label)
    for i, r in enumerate(ranks):
        out.append(f'<text x="4" y="{top + i * row + row - 12}">rank {r}</text>')
    out += boxes
    out.append("</svg>")
    return "\n".join(out), width, height, bubble


def loss_svg(log_path, width=640, height=320):
    pts = []
    for line in open(log_path):
        m = re.match(r"^step (\d+) loss ([0-9.eE+-]+)", line)
        if m:
            pts.append((int(m.group(1)), float(m.group(2))))
    if not pts:
        raise SystemExit("demo_pictures.py: no step lines in " + log_path)
    left, right, top, bottom = 56, 16, 32, 40
    xs = [p[0] for p in pts]
    ys = [p[1] for p in pts]
    x0, x1 = min(xs), max(max(xs), min(xs) + 1)
    y0, y1 = min(ys), max(ys)
    if y1 - y0 < 1e-9:
        y1 = y0 + 1
    sx = lambda v: left + (v - x0) / (x1 - x0) * (width - left - right)
    sy = lambda v: top + (y1 - v) / (y1 - y0) * (height - top - bottom)
    poly = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="11">',
           '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="{left}" y="18" font-size="13">training loss: {ys[0]:.4f} at step {xs[0]} '
           f'-> {ys[-1]:.4f} at step {xs[-1]}</text>',
           f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" stroke="black"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="black"/>']
    for v in (y0, (y0 + y1) / 2, y1):
        out.append(f'<text x="4" y="{sy(v) + 4:.1f}">{v:.3f}</text>')
    for v in (x0, (x0 + x1) // 2, x1):
        out.append(f'<text x="{sx(v) - 6:.1f}" y="{height - bottom + 16}">{v}</text>')
    out.append(f'<text x="{width / 2 - 16}" y="{height - 6}">step</text>')
    out.append(f'<polyline points="{poly}" fill="none" stroke="#4e79a7" stroke-width="2"/>')
    out.append("</svg>")
    return "\n".join(out)


def main(argv):
    step = None
    if "--step" in argv:
        i = argv.index("--step")
        step = int(argv[i + 1])
        argv = argv[:i] + argv[i + 2:]
    if len(argv) != 5:
        sys.exit(__doc__)
    trace, log, sim, outdir = argv[1:]
    meas, mw, mh, bubble = measured_svg(trace, step)
    sim_text = open(sim).read()
    m = re.search(r'<svg[^>]*width="([0-9.]+)"[^>]*height="([0-9.]+)"', sim_text)
    sw, sh = (float(m.group(1)), float(m.group(2))) if m else (mw, 200.0)
    # One picture: the measured step above the simulated schedule, each at
    # its own time scale (the titles give both spans).
    width = max(mw, sw)
    body_meas = re.sub(r"^<svg[^>]*>", "", meas).rsplit("</svg>", 1)[0]
    body_sim = re.sub(r"^<\?xml[^>]*>\s*", "", sim_text)
    body_sim = re.sub(r"^<svg[^>]*>", "", body_sim.strip()).rsplit("</svg>", 1)[0]
    combined = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" '
                f'height="{mh + sh + 8:.0f}" font-family="sans-serif" font-size="10">\n'
                f'<svg x="0" y="0" width="{mw}" height="{mh}">{body_meas}</svg>\n'
                f'<svg x="0" y="{mh + 8}" width="{sw}" height="{sh}">{body_sim}</svg>\n</svg>\n')
    open(f"{outdir}/timeline.svg", "w").write(combined)
    open(f"{outdir}/loss.svg", "w").write(loss_svg(log) + "\n")
    print(f"{bubble:.4f}")


if __name__ == "__main__":
    main(sys.argv)
