#!/usr/bin/env bash
# Foundry's cast against a running `stave node --dev`, as a developer uses it with Anvil:
# unlocked sends and deploys (eth_sendTransaction with the node's accounts), cast run
# (replays a transaction locally on the node's state), access lists, call overrides,
# message signing, the dev chain's mining and clock controls, state edits, snapshots,
# impersonation, and state read at a block long past.
# Usage: interop/cast.sh <cast binary> <rpc port> <path to StaveToken.bin>
set -euo pipefail
cast="$1"
export ETH_RPC_URL="http://127.0.0.1:$2"
token_code="$(cat "$3")"
# Dev accounts 2 and 3: the other interop scripts send from 0 and 1.
from=0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC
to=0x90F79bf6EB2c4f870365E785982E1f101E93b906
fail() { echo "cast: $*" >&2; exit 1; }
field() { python3 -c "import json,sys; print(json.load(sys.stdin)[\"$1\"])"; }

accounts="$("$cast" rpc eth_accounts)"
python3 -c "import json,sys; a=json.loads(sys.argv[1]); assert len(a) == 10 and '${from,,}' in a, a" "$accounts" \
    || fail "eth_accounts: $accounts"

# Unlocked sends: the node fills in nonce, gas and fees and signs.
first="$("$cast" send --unlocked --from "$from" "$to" --value 1ether --json)"
[ "$(echo "$first" | field status)" = 0x1 ] || fail "an unlocked ETH transfer failed"
first_block="$(python3 -c 'import sys; print(int(sys.argv[1], 16))' "$(echo "$first" | field blockNumber)")"
balance_then="$("$cast" balance --block "$first_block" "$to")"
supply="$("$cast" abi-encode 'constructor(uint256)' 1000000)"
token="$("$cast" send --unlocked --from "$from" --create "$token_code${supply#0x}" --json | field contractAddress)"
transfer="$("$cast" send --unlocked --from "$from" "$token" 'transfer(address,uint256)' "$to" 5 --json)"
[ "$(echo "$transfer" | field status)" = 0x1 ] || fail "an unlocked token transfer failed"
[ "$("$cast" call "$token" 'balanceOf(address)(uint256)' "$to")" = 5 ] || fail "balanceOf after the transfer"
echo "cast: unlocked transfer, deploy and token transfer"

# cast run replays the transfer on the node's state, with its call trace.
run="$("$cast" run "$(echo "$transfer" | field transactionHash)" 2>&1)"
grep -q 'Transaction successfully executed' <<<"$run" && grep -q 'emit Transfer' <<<"$run" \
    || fail "cast run: $run"
# An access list names the token's two balance slots.
access="$("$cast" access-list --from "$from" "$token" 'transfer(address,uint256)' "$to" 1 --json)"
python3 -c "import json,sys; a=json.loads(sys.argv[1]); keys=a['accessList'][0]['storageKeys']; assert len(keys) == 2, a" "$access" \
    || fail "access list: $access"
# A call with overrides: code returning BALANCE(ADDRESS), and a balance.
answer="$("$cast" call "$to" --override-code "$to:0x303160005260206000f3" --override-balance "$to:4660")"
[ "$(python3 -c 'import sys; print(int(sys.argv[1], 16))' "$answer")" = 4660 ] \
    || fail "a call with code and balance overrides: $answer"
echo "cast: run, access-list and call overrides"

# eth_sign: a personal message the signer's address verifies.
signature="$("$cast" rpc eth_sign "$from" 0x68656c6c6f | tr -d '"')"
"$cast" wallet verify --address "$from" hello "$signature" >/dev/null || fail "eth_sign's signature does not verify"

# Mining on request, automine, and the block clock.
before="$("$cast" block-number)"
"$cast" rpc anvil_mine 5 >/dev/null
[ "$("$cast" block-number)" -ge $((before + 5)) ] || fail "anvil_mine 5 made fewer blocks"
"$cast" rpc evm_setAutomine true >/dev/null
[ "$("$cast" rpc anvil_getAutomine)" = true ] || fail "automine did not turn on"
mined="$("$cast" send --unlocked --from "$from" "$to" --value 1 --json | field blockNumber)"
count="$("$cast" rpc eth_getBlockTransactionCountByNumber "$mined" | tr -d '"')"
[ "$count" = 0x1 ] || fail "an automined block holds $count transactions"
"$cast" rpc evm_setAutomine false >/dev/null
now="$(date +%s)"
"$cast" rpc evm_increaseTime 3600 >/dev/null
"$cast" rpc evm_mine >/dev/null
[ "$("$cast" block latest -f timestamp)" -ge $((now + 3590)) ] || fail "evm_increaseTime did not move the clock"
next=$((now + 100000))
"$cast" rpc evm_setNextBlockTimestamp "$next" >/dev/null
"$cast" rpc evm_mine >/dev/null
stamped="$("$cast" block latest -f timestamp)"
[ "$stamped" = "$next" ] || fail "evm_setNextBlockTimestamp: $stamped, not $next"
echo "cast: eth_sign, anvil_mine, automine, evm_increaseTime, evm_setNextBlockTimestamp"

# State edits, each committed with a block made at once.
edited=0x00000000000000000000000000000000000e617e
"$cast" rpc anvil_setBalance "$edited" 0x1234 >/dev/null
[ "$("$cast" balance "$edited")" = 4660 ] || fail "anvil_setBalance"
"$cast" rpc anvil_setNonce "$edited" 0x7 >/dev/null
[ "$("$cast" nonce "$edited")" = 7 ] || fail "anvil_setNonce"
"$cast" rpc hardhat_setCode "$edited" 0x303160005260206000f3 >/dev/null
[ "$("$cast" code "$edited")" = 0x303160005260206000f3 ] || fail "anvil_setCode"
answer="$("$cast" call "$edited")"
[ "$(python3 -c 'import sys; print(int(sys.argv[1], 16))' "$answer")" = 4660 ] || fail "the edited code's call: $answer"
slot=0x0000000000000000000000000000000000000000000000000000000000000005
value=0x00000000000000000000000000000000000000000000000000000000000000ff
"$cast" rpc anvil_setStorageAt "$token" "$slot" "$value" >/dev/null
[ "$("$cast" storage "$token" 5)" = "$value" ] || fail "anvil_setStorageAt"
[ "$("$cast" call "$token" 'balanceOf(address)(uint256)' "$to")" = 5 ] || fail "an edit changed other slots"
echo "cast: anvil_setBalance, setNonce, setCode, setStorageAt"

# Snapshots and impersonation, as a Foundry script uses them against Anvil.
snapshot="$("$cast" rpc evm_snapshot | tr -d '"')"
head="$("$cast" block-number)"
head_hash="$("$cast" block "$head" -f hash)"
whale=0x00000000000000000000000000000000000cafe0
"$cast" rpc anvil_setBalance "$whale" 0xde0b6b3a7640000 >/dev/null
"$cast" rpc anvil_impersonateAccount "$whale" >/dev/null
sent_from="$("$cast" send --unlocked --from "$whale" "$to" --value 1 --json | field from)"
[ "${sent_from,,}" = "$whale" ] || fail "an impersonated send came from $sent_from"
"$cast" rpc anvil_stopImpersonatingAccount "$whale" >/dev/null
# cast 1.7.1 exits 0 even when the node refuses: the answer tells.
refused="$("$cast" send --unlocked --from "$whale" "$to" --value 1 --json 2>&1 || true)"
case "$refused" in
*"not an account of this node"*) ;;
*) fail "a send after the impersonation stopped: $refused" ;;
esac
[ "$("$cast" rpc evm_revert "$snapshot")" = true ] || fail "evm_revert"
[ "$("$cast" block "$head" -f hash)" = "$head_hash" ] || fail "evm_revert changed block $head"
[ "$("$cast" balance "$whale")" = 0 ] || fail "evm_revert kept the balance edit"
[ "$("$cast" rpc evm_revert "$snapshot")" = false ] || fail "a snapshot reverted to twice"
echo "cast: evm_snapshot, evm_revert, anvil_impersonateAccount"

# State long past: the dev node keeps every block's state.
"$cast" rpc anvil_mine 300 >/dev/null
[ "$("$cast" balance --block "$first_block" "$to")" = "$balance_then" ] \
    || fail "the balance at block $first_block changed"
[ "$("$cast" balance --block "$((first_block - 1))" "$to")" != "$balance_then" ] \
    || fail "the balance before block $first_block"
echo "cast: state at block $first_block, 300 blocks later"
