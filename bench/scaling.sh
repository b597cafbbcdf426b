#!/usr/bin/env bash
# How Stave scales with cores: `stave bench pipeline` (import TPS, parallel run) and
# `stave bench node` (cold import over a large state, with prefetch) at 1, 2, 4, 8 and 16
# threads, as many as this machine has (each run pinned to that many CPUs with taskset and
# given that many rayon threads). Amdahl's law fitted to the 1- and 2-thread figures
# predicts the rest; the table shows each prediction beside the measurement where there is
# one, so a run on a larger machine checks the model. Writes scaling.md (the table) and
# scaling.svg (the chart) into OUT (default: the current directory).
#
#   ACCOUNTS=1000000 TXS=100000 bench/scaling.sh
# STAVE names the binary (default: the release build under $CARGO_TARGET_DIR).
set -euo pipefail
STAVE="${STAVE:-${CARGO_TARGET_DIR:-$HOME/.cache/stave-target}/release/stave}"
[ -x "$STAVE" ] || { echo "no stave binary at $STAVE (build it, or set STAVE)" >&2; exit 1; }
OUT="${OUT:-.}"; ACCOUNTS="${ACCOUNTS:-1000000}"; TXS="${TXS:-100000}"
cores=$(nproc)
results="$(mktemp)"
trap 'rm -f "$results"' EXIT
for threads in 1 2 4 8 16; do
  [ "$threads" -le "$cores" ] || break
  cpus="0-$((threads - 1))"
  pipeline=$(RAYON_NUM_THREADS=$threads taskset -c "$cpus" "$STAVE" bench pipeline \
    --txs "$TXS" --runs 3 --json 2>/dev/null | tail -1)
  node=$(RAYON_NUM_THREADS=$threads taskset -c "$cpus" "$STAVE" bench node \
    --accounts "$ACCOUNTS" --json 2>/dev/null | tail -1)
  echo "$threads $pipeline" >> "$results"
  echo "$threads $node" >> "$results"
  echo "measured $threads thread(s)" >&2
done
python3 - "$results" "$OUT" "$cores" <<'PY'
import json, sys
results, out, cores = sys.argv[1], sys.argv[2], int(sys.argv[3])
pipeline, node = {}, {}
for line in open(results):
    threads, report = line.split(" ", 1)
    report = json.loads(report)
    if "tps_prefetch" in report:
        node[int(threads)] = report["tps_prefetch"]
    else:
        pipeline[int(threads)] = report["parallel"]["tps"]

def amdahl(measured):
    """TPS at n threads by Amdahl's law, its parallel share fitted to 1 and 2 threads."""
    if 1 not in measured or 2 not in measured:
        return None, lambda n: None
    speedup = measured[2] / measured[1]
    share = min(1.0, max(0.0, 2 * (1 - 1 / speedup)))
    return share, lambda n: measured[1] / ((1 - share) + share / n)

fits = {"pipeline": amdahl(pipeline), "node": amdahl(node)}
rows = ["| threads | pipeline TPS | predicted | node TPS (cold, prefetch) | predicted |",
        "|---|---|---|---|---|"]
fmt = lambda v: "–" if v is None else f"{v:,.0f}"
for n in [1, 2, 4, 8, 16]:
    rows.append(f"| {n} | {fmt(pipeline.get(n))} | {fmt(fits['pipeline'][1](n))} "
                f"| {fmt(node.get(n))} | {fmt(fits['node'][1](n))} |")
share = lambda name: "–" if fits[name][0] is None else f"{fits[name][0]:.3f}"
text = "\n".join(rows) + (f"\n\nParallel share fitted (Amdahl, 1 and 2 threads): pipeline "
        f"{share('pipeline')}, node {share('node')}; this machine has {cores} cores.\n")
open(f"{out}/scaling.md", "w").write(text)
print(text)

# The chart: measured points and the fitted curves, TPS against threads (log2 axis).
width, height, pad = 640, 360, 50
series = [("pipeline", pipeline, "#2b6cb0"), ("node", node, "#c05621")]
top = max([1.0] + [v for _, m, _ in series for v in m.values()]
          + [fits[name][1](16) or 0 for name, _, _ in series])
x = lambda n: pad + (width - 2 * pad) * ({1: 0, 2: 1, 4: 2, 8: 3, 16: 4}[n] / 4)
y = lambda v: height - pad - (height - 2 * pad) * v / top
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">',
       f'<text x="{pad}" y="20">TPS by threads: measured (dots), Amdahl fit (line)</text>']
for n in [1, 2, 4, 8, 16]:
    svg.append(f'<text x="{x(n) - 4}" y="{height - pad + 18}">{n}</text>')
for name, measured, colour in series:
    predict = fits[name][1]
    if predict(1) is not None:
        points = " ".join(f"{x(n):.1f},{y(predict(n)):.1f}" for n in [1, 2, 4, 8, 16])
        svg.append(f'<polyline fill="none" stroke="{colour}" points="{points}"/>')
    for n, v in measured.items():
        svg.append(f'<circle cx="{x(n):.1f}" cy="{y(v):.1f}" r="4" fill="{colour}"/>')
    svg.append(f'<text x="{width - pad - 60}" y="{40 + 16 * [s[0] for s in series].index(name)}" fill="{colour}">{name}</text>')
svg.append("</svg>")
open(f"{out}/scaling.svg", "w").write("\n".join(svg) + "\n")
PY
