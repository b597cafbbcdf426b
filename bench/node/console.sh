#!/usr/bin/env bash
# What an open web console costs a node (#67): `stave load --rate max` against a dev node
# with no page open, then with the console open in headless Chromium (polling `/metrics`
# and the console's JSON-RPC every second). ROUNDS pairs, alternating; each prints both
# included TPS figures.
#
#   ROUNDS=3 TXS=100000 bench/node/console.sh
# shellcheck source=../testnet/lib.sh
source "$(dirname "$0")/../testnet/lib.sh"
ROUNDS="${ROUNDS:-3}"; TXS="${TXS:-100000}"; ACCOUNTS="${ACCOUNTS:-200}"
CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"

# run CONSOLE: a fresh dev node, loaded, with the console open if CONSOLE is 1; its TPS.
run() {
  local dir="$WORK/node-$RANDOM"
  start_dev "$dir"
  local pid=$DEV_PID
  local browser=""
  if [ "$1" = 1 ]; then
    "$CHROMIUM" --headless=new --no-sandbox --disable-gpu --no-first-run \
      --user-data-dir="$dir/chromium" "http://127.0.0.1:$METRICS0/" > /dev/null 2>&1 &
    browser=$!
    PIDS+=("$browser")
    sleep 3
  fi
  "$STAVE" load --rpc "http://127.0.0.1:$RPC0" --accounts "$ACCOUNTS" --txs "$TXS" \
    --rate max --json 2>/dev/null | tail -1 \
    | python3 -c 'import sys,json; print(json.load(sys.stdin)["included_tps"])'
  [ -n "$browser" ] && { kill "$browser"; wait "$browser" 2>/dev/null || true; }
  kill -TERM "$pid"; wait "$pid" 2>/dev/null || true
  rm -rf "$dir"
}

for ((round = 1; round <= ROUNDS; round++)); do
  closed=$(run 0)
  open=$(run 1)
  python3 -c "print(f'round $round: no page {float($closed):,.0f} tx/s, console open {float($open):,.0f} tx/s, ratio {float($open)/float($closed):.3f}')"
done
