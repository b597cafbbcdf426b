#!/usr/bin/env bash
# #68's soak (not CI; the curve goes to MEASUREMENTS.md): 4 validators for DURATION
# seconds (default 3600) at half their maximum rate, measured first with a `--rate max`
# run of MAX_TXS transfers (RATE overrides it). The load is `stave load` runs of CHUNK
# seconds back to back against node 0. A monitor polls every node's head every 100 ms
# and its RSS every 10 s, and the script ends with:
# - the RSS curve of every node (one row a SAMPLE seconds): anonymous, of which lazily
#   freed (pages the allocator gave back with MADV_FREE: counted in RSS until the kernel
#   needs them, which it then takes without writing anything), and file-backed (LMDB maps
#   the database, so its pages count in RSS as the file grows); each node's largest
#   deviation from its value at 5 minutes of the memory it holds, anonymous less lazily
#   freed, and of anonymous RSS (target: within 10%);
# - each node's longest stall, the longest time its head stood still (target: under 2
#   leader timeouts);
# - transactions sent, accepted and included over all runs (target: every one included).
#
# Usage: bench/testnet/soak.sh   (STAVE, DURATION, RATE, CHUNK, SAMPLE, MAX_TXS)
source "$(dirname "$0")/lib.sh"
DURATION="${DURATION:-3600}" CHUNK="${CHUNK:-60}" SAMPLE="${SAMPLE:-300}"
MAX_TXS="${MAX_TXS:-50000}"

start_testnet
leader_timeout_ms="$(sed -n 's/^leader_timeout_ms *= *//p' "$WORK"/tn/node0/config.toml | head -1)"
leader_timeout_ms="${leader_timeout_ms:-3000}"

if [[ -z "${RATE:-}" ]]; then
  max="$(load $RPC0 200 "$MAX_TXS" max)"
  RATE="$(python3 -c 'import json,sys; print(int(json.loads(sys.argv[1])["included_tps"] / 2))' "$max")"
  echo "rate max: $max"
fi
echo "soak: ${DURATION} s at ${RATE} tx/s, leader timeout ${leader_timeout_ms} ms"

mapfile -t node_pids < <(node_pids)
[[ ${#node_pids[@]} -eq 4 ]] || { echo "found ${#node_pids[@]} node processes, not 4" >&2; exit 1; }

python3 - "$DURATION" "$RPC0" "${node_pids[@]}" > "$WORK/monitor.json" <<'EOF' &
import json, sys, time, urllib.request
duration, rpc0, pids = float(sys.argv[1]), int(sys.argv[2]), [int(p) for p in sys.argv[3:]]
def head(i):
    body = b'{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}'
    req = urllib.request.Request(f"http://127.0.0.1:{rpc0 + i}", body, {"content-type": "application/json"})
    try:
        return int(json.load(urllib.request.urlopen(req, timeout=5))["result"], 16)
    except Exception:
        return None
def rss_mb(pid, field):
    with open(f"/proc/{pid}/smaps_rollup") as rollup:
        for line in rollup:
            if line.startswith(field):
                return int(line.split()[1]) / 1024
start = time.monotonic()
last = [(head(i), start) for i in range(4)]
stall = [0.0] * 4
rss, next_rss = [], start
while (now := time.monotonic()) - start < duration:
    for i in range(4):
        h = head(i)
        if h is not None and h != last[i][0]:
            last[i] = (h, now)
        stall[i] = max(stall[i], now - last[i][1])
    if now >= next_rss:
        rss.append([round(now - start)]
                   + [round(rss_mb(p, field), 1) for field in ("Anonymous:", "LazyFree:") for p in pids]
                   + [round(rss_mb(p, "Rss:") - rss_mb(p, "Anonymous:"), 1) for p in pids])
        next_rss += 10
    time.sleep(0.1)
print(json.dumps({"stall_s": [round(s, 2) for s in stall], "rss": rss, "heads": [l[0] for l in last]}))
EOF
monitor=$!

: > "$WORK/loads.jsonl"
end=$((SECONDS + DURATION))
while (( SECONDS + CHUNK <= end )); do
  "$STAVE" load --rpc "http://127.0.0.1:$RPC0" --accounts 200 --rate "$RATE" \
    --duration "${CHUNK}s" --json 2>/dev/null | tail -1 >> "$WORK/loads.jsonl"
done
wait "$monitor"

python3 - "$WORK/monitor.json" "$WORK/loads.jsonl" "$SAMPLE" "$leader_timeout_ms" <<'EOF'
import json, sys
monitor = json.load(open(sys.argv[1]))
loads = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
sample, leader_timeout = int(sys.argv[3]), int(sys.argv[4]) / 1000
rss = monitor["rss"]
print("RSS (MB) of nodes 0-3: anonymous, of it lazily freed (MADV_FREE: the kernel's to take),")
print("then file-backed (LMDB's mapped pages: the page cache's, growing with the database)")
print(f"{'s':>6} " + " ".join(f"{kind + str(i):>8}" for kind in ("anon", "lazy", "file") for i in range(4)))
for row in rss:
    if row[0] % sample < 10:
        print(f"{row[0]:>6} " + " ".join(f"{v:>8}" for v in row[1:]))
base = next((row for row in rss if row[0] >= 300), rss[0])
later = [row for row in rss if row[0] >= base[0]]
held = lambda row, i: row[i + 1] - row[i + 5]
for i in range(4):
    dev_held = max(abs(held(row, i) - held(base, i)) / held(base, i) for row in later)
    dev_anon = max(abs(row[i + 1] - base[i + 1]) / base[i + 1] for row in later)
    print(f"node{i}: held (anonymous less lazily freed) at {base[0]} s {held(base, i):.1f} MB, "
          f"largest deviation after it {dev_held:.1%} (anonymous RSS: {dev_anon:.1%}); "
          f"longest stall {monitor['stall_s'][i]} s (2 leader timeouts: {2 * leader_timeout} s)")
sent = sum(l["sent"] for l in loads)
accepted = sum(l["accepted"] for l in loads)
included = sum(l["included"] for l in loads)
p99 = max(l["latency_ms"]["p99"] for l in loads)
rate = sum(l["included_tps"] for l in loads) / len(loads)
print(f"{len(loads)} load runs: sent {sent}, accepted {accepted}, included {included}; "
      f"mean included {rate:.0f} tx/s, worst run p99 {p99:.0f} ms; final heads {monitor['heads']}")
EOF
du -sh "$WORK/tn"
