#!/usr/bin/env bash
# How the node's import path holds up as the state grows: `stave state generate` writes
# data dirs of each size in SIZES (default 1, 10 and 50 million accounts), then `stave
# bench node --datadir` imports the same shape of blocks into each, cold, without and with
# prefetch. Prints each run's JSON line, then a table: TPS (and its ratio to the smallest
# state's), hit rate above disk, peak RSS, disk bytes per account and per transfer, and
# how long generating took. WORKLOAD=erc20 gives every account a balance of a generated
# ERC-20 and imports token transfers instead of ether transfers. Needs about 120 bytes of
# disk per account (230 with the token), twice over for the largest (the state and one
# copy of it at a time).
#
#   SIZES="1000000 10000000 50000000" [WORKLOAD=erc20] bench/node/state_size.sh
set -euo pipefail
STAVE="${STAVE:-${CARGO_TARGET_DIR:-$HOME/.cache/stave-target}/release/stave}"
[ -x "$STAVE" ] || { echo "no stave binary at $STAVE (build it, or set STAVE)" >&2; exit 1; }
SIZES="${SIZES:-1000000 10000000 50000000}"
WORKLOAD="${WORKLOAD:-transfer}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/stave-state-size.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
results="$WORK/results"
for accounts in $SIZES; do
  dir="$WORK/state-$accounts"
  holders=0
  [ "$WORKLOAD" = erc20 ] && holders="$accounts"
  generated=$("$STAVE" state generate --datadir "$dir" --accounts "$accounts" \
    --token-holders "$holders" 2>/dev/null | tail -1)
  report=$("$STAVE" bench node --datadir "$dir" --workload "$WORKLOAD" --json "$@" 2>/dev/null | tail -1)
  echo "$report"
  echo "$generated $report" >> "$results"
  rm -rf "$dir"
done
python3 - "$results" <<'PY'
import json, sys
rows = []
for line in open(sys.argv[1]):
    decoder = json.JSONDecoder()
    generated, end = decoder.raw_decode(line)
    report = json.loads(line[end:])
    rows.append((generated, report))
base = rows[0][1]["tps_prefetch"]
print("| accounts | generate s | TPS no prefetch | TPS prefetch | speedup | vs smallest | above disk | RSS MiB | disk B/account | disk B/tx |")
print("|---|---|---|---|---|---|---|---|---|---|")
for generated, r in rows:
    print(f"| {r['accounts']:,} | {generated['seconds']:.0f} | {r['tps_no_prefetch']:,.0f} | {r['tps_prefetch']:,.0f} "
          f"| {r['speedup']:.2f}x | {r['tps_prefetch'] / base:.3f} | {r['hit_rate_above_disk']:.3f} "
          f"| {r['rss_bytes'] / 2**20:,.0f} | {r['disk_bytes_per_account']:.0f} | {r['disk_bytes_per_tx']:.0f} |")
PY
