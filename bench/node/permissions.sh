#!/usr/bin/env bash
# What the governance contract's permission checks cost (#62): `stave load --rate max`
# against a dev node whose genesis has the contract with no list in force, then against
# one where only permitted senders may send and 1,000 accounts are permitted (the load's
# senders among them). ROUNDS pairs, alternating; each prints both TPS figures.
#
#   ROUNDS=3 TXS=100000 bench/node/permissions.sh
# shellcheck source=../testnet/lib.sh
source "$(dirname "$0")/../testnet/lib.sh"
ROUNDS="${ROUNDS:-3}"; TXS="${TXS:-100000}"; ACCOUNTS="${ACCOUNTS:-200}"

"$STAVE" genesis new --accounts 1000 --committee 1 --out "$WORK/open.json" 2>/dev/null
"$STAVE" genesis new --accounts 1000 --committee 1 --restrict-senders --out "$WORK/listed.json" 2>/dev/null

# `stave genesis new` funds Stave's deterministic dev accounts: the first one funds the load.
FUNDER=$("$STAVE" keys show --dev --index 0 | python3 -c 'import sys,json; print(json.load(sys.stdin)["private_key"])')

# tps GENESIS: a fresh dev node on it, loaded; the included TPS.
tps() {
  local dir="$WORK/node-$RANDOM"
  mkdir -p "$dir"
  printf 'genesis = "%s"\ndatadir = "data"\nrpc_addr = "127.0.0.1:%s"\nmetrics_addr = "127.0.0.1:%s"\n' \
    "$1" "$RPC0" "$METRICS0" > "$dir/node.toml"
  "$STAVE" node --config "$dir/node.toml" > "$dir/node.log" 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  wait_for "$RPC0"
  "$STAVE" load --rpc "http://127.0.0.1:$RPC0" --key "$FUNDER" --accounts "$ACCOUNTS" --txs "$TXS" \
    --rate max --json 2>/dev/null | tail -1 | python3 -c 'import sys,json; print(json.load(sys.stdin)["included_tps"])'
  kill -TERM "$pid"; wait "$pid" 2>/dev/null || true
  rm -rf "$dir"
}

for ((round = 1; round <= ROUNDS; round++)); do
  open=$(tps "$WORK/open.json")
  listed=$(tps "$WORK/listed.json")
  python3 -c "print(f'round $round: open {float($open):,.0f} tx/s, 1,000 permitted senders {float($listed):,.0f} tx/s, ratio {float($listed)/float($open):.3f}')"
done
