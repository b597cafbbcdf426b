"""Differential tests against Anvil: the same transactions sent to a `stave node --dev`
and to Anvil (both on chain id 1337, Prague rules, the dev mnemonic's accounts), each
traced on both with `callTracer`, `prestateTracer` (plain and `diffMode`) and the struct
logger, then calls with state and block overrides, gas estimates and access lists on the
resulting state; the answers are compared field by field. Anvil is the reference (it traces with revm-inspectors
too, so every field must agree); the only differences allowed are the block's proposer
(COINBASE), which the two chains name differently and which earns different tips, and
the top call frame's `gas`, which Stave reports as go-ethereum's callTracer does (the
transaction's gas limit) and Anvil net of the intrinsic gas, and accounts empty before
the transaction in the plain prestate, which go-ethereum (and Stave) leave out and Anvil
lists.

Usage: python anvil.py <stave rpc port> <anvil rpc port> <path to StaveToken.bin>
"""

import json
import sys
import time
import urllib.request

from eth_account import Account
from eth_utils import to_checksum_address

stave_port, anvil_port, bin_path = sys.argv[1], sys.argv[2], sys.argv[3]
NODES = {"stave": f"http://127.0.0.1:{stave_port}", "anvil": f"http://127.0.0.1:{anvil_port}"}
Account.enable_unaudited_hdwallet_features()
MNEMONIC = "test test test test test test test test test test test junk"
# Accounts the other interop scripts leave alone.
deployer = Account.from_mnemonic(MNEMONIC, account_path="m/44'/60'/0'/0/7")
holder = Account.from_mnemonic(MNEMONIC, account_path="m/44'/60'/0'/0/8")
GAS_PRICE = 5 * 10**9


def rpc(node, method, params):
    request = urllib.request.Request(
        NODES[node],
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode(),
        {"content-type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        answer = json.load(response)
    if "error" in answer:
        raise RuntimeError(f"{node} {method}: {answer['error']}")
    return answer["result"]


def word(value):
    return value.to_bytes(32, "big").hex()


TRANSFER = "a9059cbb"  # transfer(address,uint256)
token_code = open(bin_path).read().strip().removeprefix("0x")
# A creation whose initcode CREATEs a child (initcode PUSH1 0 PUSH1 0 RETURN), then
# returns no code: a nested CREATE frame.
factory = "6460006000f3" "600052" "6005" "601b" "6000" "f0" "50" "6000" "6000" "f3"
token = None  # the token's address, the same on both chains (same sender and nonce)
sent = []
for name, account, nonce, to, data, value in [
    ("token deployment", deployer, 0, None, token_code + word(10**24), 0),
    ("token transfer", deployer, 1, "TOKEN", TRANSFER + word(int(holder.address, 16)) + word(10**21), 0),
    ("failing transfer", holder, 0, "TOKEN", TRANSFER + word(int(deployer.address, 16)) + word(10**30), 0),
    ("contract creating a contract", deployer, 2, None, factory, 0),
    ("ether transfer", holder, 1, deployer.address, "", 10**18),
]:
    tx = {
        "chainId": 1337,
        "nonce": nonce,
        "gasPrice": GAS_PRICE,
        "gas": 3_000_000,
        "value": value,
        "data": "0x" + data,
    }
    if to is not None:
        tx["to"] = token if to == "TOKEN" else to
    signed = account.sign_transaction(tx)
    raw = "0x" + signed.raw_transaction.hex().removeprefix("0x")
    hashes = {node: rpc(node, "eth_sendRawTransaction", [raw]) for node in NODES}
    assert len(set(hashes.values())) == 1, hashes
    receipts = {}
    for node in NODES:
        deadline = time.time() + 30
        while (receipt := rpc(node, "eth_getTransactionReceipt", [hashes[node]])) is None:
            assert time.time() < deadline, f"{name} not included on {node}"
            time.sleep(0.1)
        receipts[node] = receipt
    for field in ("status", "gasUsed", "contractAddress"):
        values = {node: receipts[node][field] for node in NODES}
        assert len(set(values.values())) == 1, f"{name}: {field} {values}"
    if name == "token deployment":
        token = to_checksum_address(receipts["stave"]["contractAddress"])
    sent.append((name, hashes["stave"], {node: receipts[node]["blockNumber"] for node in NODES}))
print(f"traces: {len(sent)} transactions included on both", flush=True)

coinbases = {
    node: {rpc(node, "eth_getBlockByNumber", [number, False])["miner"].lower() for number in
           (numbers[node] for _, _, numbers in sent)}
    for node in NODES
}


def without_coinbase(node, accounts):
    return {address: state for address, state in accounts.items() if address.lower() not in coinbases[node]}


def was_empty(state):
    return int(state.get("balance", "0x0"), 16) == 0 and not state.get("nonce") and not state.get("code")


def compare(what, answers):
    stave, anvil = answers["stave"], answers["anvil"]
    if stave != anvil:
        print(f"{what} differs:\nstave: {json.dumps(stave, indent=1)[:4000]}\nanvil: {json.dumps(anvil, indent=1)[:4000]}")
        sys.exit(1)


def call_frames(what, config, gas, trace):
    """Both nodes' callTracer answers, their top frame's gas checked and set aside."""
    answers = {node: trace(node, {"tracer": "callTracer", "tracerConfig": config}) for node in NODES}
    stave_gas = answers["stave"].pop("gas")
    assert stave_gas == hex(gas), f"{what}: top frame gas {stave_gas}, not the gas limit {hex(gas)}"
    assert int(answers["anvil"].pop("gas"), 16) < gas
    compare(f"{what}: callTracer {config}", answers)


checked = 0
for name, tx_hash, _ in sent:
    for config in ({}, {"withLog": True}, {"onlyTopCall": True}):
        call_frames(name, config, 3_000_000, lambda node, options: rpc(node, "debug_traceTransaction", [tx_hash, options]))
    pre = {node: without_coinbase(node, rpc(node, "debug_traceTransaction", [tx_hash, {"tracer": "prestateTracer"}])) for node in NODES}
    assert not any(was_empty(state) for state in pre["stave"].values()), pre["stave"]
    pre["anvil"] = {address: state for address, state in pre["anvil"].items() if not was_empty(state)}
    compare(f"{name}: prestateTracer", pre)
    diff = {}
    for node in NODES:
        answer = rpc(node, "debug_traceTransaction", [tx_hash, {"tracer": "prestateTracer", "tracerConfig": {"diffMode": True}}])
        diff[node] = {side: without_coinbase(node, answer[side]) for side in ("pre", "post")}
    compare(f"{name}: prestateTracer diffMode", diff)
    for options in ({}, {"enableMemory": True, "enableReturnData": True}, {"disableStack": True, "disableStorage": True}):
        logs = {node: rpc(node, "debug_traceTransaction", [tx_hash, options]) for node in NODES}
        compare(f"{name}: struct logs {options}", logs)
        assert logs["stave"]["structLogs"] or name == "ether transfer", f"{name}: no struct logs"
    four = {node: rpc(node, "debug_traceTransaction", [tx_hash, {"tracer": "4byteTracer"}]) for node in NODES}
    compare(f"{name}: 4byteTracer", four)
    checked += 1

# A call traced on the latest state: the holder's token balance.
BALANCE_OF = "70a08231"
call = {"from": holder.address, "to": token, "data": "0x" + BALANCE_OF + word(int(holder.address, 16))}
call["gas"] = hex(100_000)
call_frames("debug_traceCall", {}, 100_000, lambda node, options: rpc(node, "debug_traceCall", [call, "latest", options]))
# Parity-style traces of the token transfer.
transfer_hash = sent[1][1]
parity = {node: [{k: v for k, v in frame.items() if k not in ("blockHash", "blockNumber")}
                 for frame in rpc(node, "trace_transaction", [transfer_hash])] for node in NODES}
compare("trace_transaction", parity)
print(f"traces: {checked} transactions traced alike on Stave and Anvil (callTracer, prestateTracer, struct logs, 4byte, debug_traceCall, trace_transaction)")

# Bad requests get typed errors, not crashes.
for params, wanted in [
    (["0x" + "11" * 32, {}], "not found"),
    ([transfer_hash, {"tracer": "function() { return {}; }"}], "tracer"),
    ([transfer_hash, {"tracer": "callTracer", "tracerConfig": {"onlyTopCall": "yes"}}], "tracer config"),
]:
    try:
        rpc("stave", "debug_traceTransaction", params)
    except RuntimeError as error:
        assert wanted in str(error), error
    else:
        raise AssertionError(f"{params} was answered")
print("traces: bad tracer requests refused")

# Calls that pretend: state overrides (a token balance, a balance, code) and block
# overrides (number, time), on eth_call, eth_estimateGas and debug_traceCall.
from eth_utils import keccak

def balance_slot(holder):
    # StaveToken's balanceOf mapping is its first slot: keccak(holder . 0).
    return "0x" + keccak(bytes.fromhex(word(int(holder, 16)) + word(0))).hex()

stranger = Account.from_mnemonic(MNEMONIC, account_path="m/44'/60'/0'/0/9").address
overrides = {token: {"stateDiff": {balance_slot(stranger): "0x" + word(12345)}}}
read = {"to": token, "data": "0x" + BALANCE_OF + word(int(stranger, 16))}
calls = {node: rpc(node, "eth_call", [read, "latest", overrides]) for node in NODES}
compare("eth_call with a stateDiff override", calls)
assert int(calls["stave"], 16) == 12345, calls
# The stranger sends tokens it holds only in the override: estimated alike.
send = {"from": stranger, "to": token, "data": "0x" + TRANSFER + word(int(holder.address, 16)) + word(100)}
compare("eth_estimateGas with an override", {node: rpc(node, "eth_estimateGas", [send, "latest", overrides]) for node in NODES})
# Code that returns NUMBER, TIMESTAMP and BALANCE(CALLER), under block and state overrides.
probe = "0x" + "43600052" + "42602052" + "3331604052" + "60606000f3"
pretend = {"0x" + "ab" * 20: {"code": probe}, stranger: {"balance": hex(777)}}
block = {"number": hex(4242), "time": hex(1_900_000_000)}
call = {"from": stranger, "to": "0x" + "ab" * 20}
answers = {node: rpc(node, "eth_call", [call, "latest", pretend, block]) for node in NODES}
compare("eth_call with code, balance and block overrides", answers)
assert answers["stave"] == "0x" + word(4242) + word(1_900_000_000) + word(777), answers
traced = {}
for node in NODES:
    frame = rpc(node, "debug_traceCall", [call, "latest", {"tracer": "callTracer", "stateOverrides": pretend, "blockOverrides": block}])
    frame.pop("gas")
    traced[node] = frame
compare("debug_traceCall with overrides", traced)
# Access lists: a transfer touches the token's balance slots of both holders.
access = {node: rpc(node, "eth_createAccessList", [{"from": holder.address, "to": token, "data": "0x" + TRANSFER + word(int(deployer.address, 16)) + word(1)}, "latest"]) for node in NODES}
compare("eth_createAccessList", access)
assert len(access["stave"]["accessList"][0]["storageKeys"]) == 2, access
print("anvil: overrides, gas estimates and access lists answered alike")

# eth_simulateV1: the same payloads on both, each call's status, return data, gas, logs
# (address, topics, data) and failure compared. Where the two differ, Stave answers as
# go-ethereum and the execution-apis spec do, and Anvil 1.7.1 otherwise: a reverted call
# has no return data and an error of code 3 carrying the revert data, where Anvil puts
# the revert data in `returnData` and answers code -3200 without data. So a failure is
# compared by its revert data, wherever each node puts it, and Stave's shape is checked
# on its own. Anvil also charges the base fee without `validation` (go-ethereum and Stave
# simulate at a base fee of zero then), which no compared field shows.


def sim_calls(node, blocks):
    calls = []
    for block in blocks:
        for call in block["calls"]:
            error = call.get("error")
            failure = None
            if error is not None:
                if node == "stave" and call["status"] == "0x0" and error.get("data") is not None:
                    assert error["code"] == 3 and call["returnData"] == "0x", call
                failure = error.get("data") or call["returnData"]
            calls.append({
                "status": call["status"],
                "returnData": call["returnData"] if error is None else None,
                "failure": failure,
                "gasUsed": call["gasUsed"],
                "logs": [
                    {"address": log["address"].lower(), "topics": log["topics"], "data": log["data"]}
                    for log in call["logs"]
                ],
            })
        calls.append("end of block")
    return calls


def simulate_both(what, payload):
    answers = {node: rpc(node, "eth_simulateV1", [payload, "latest"]) for node in NODES}
    compare(f"eth_simulateV1: {what}", {node: sim_calls(node, blocks) for node, blocks in answers.items()})
    # Stave's blocks chain as go-ethereum's do; Anvil's have a zero parent hash (and
    # number the first from the block simulated on, not the one after it).
    blocks = answers["stave"]
    for before, after in zip(blocks, blocks[1:]):
        assert int(after["number"], 16) == int(before["number"], 16) + 1, what
        assert after["parentHash"] == before["hash"], what
    for node, blocks in answers.items():
        for block in blocks:
            used = sum(int(call["gasUsed"], 16) for call in block["calls"])
            assert int(block["gasUsed"], 16) == used, (node, what, block["gasUsed"], used)
    return answers


# A token transfer (with its Transfer log) and one for more than the holder has (a revert
# with the token's reason).
transfer = {"from": holder.address, "to": token, "data": "0x" + TRANSFER + word(int(deployer.address, 16)) + word(5)}
too_much = {"from": holder.address, "to": token, "data": "0x" + TRANSFER + word(int(deployer.address, 16)) + word(10**30)}
answers = simulate_both("a token transfer and a revert", {"blockStateCalls": [{"calls": [transfer, too_much]}]})
assert answers["stave"][0]["calls"][0]["status"] == "0x1", answers["stave"]
assert answers["stave"][0]["calls"][1]["error"]["code"] == 3, answers["stave"]
# A call under a state override: the stranger sends tokens it holds only in the override.
simulate_both("a transfer under a state override", {"blockStateCalls": [{"stateOverrides": overrides, "calls": [send]}]})
# Two blocks: the second reads the balance the first left, under block overrides.
read_deployer = {"to": token, "data": "0x" + BALANCE_OF + word(int(deployer.address, 16))}
answers = simulate_both(
    "two blocks",
    {"blockStateCalls": [
        {"calls": [transfer]},
        {"blockOverrides": {"time": hex(1_900_000_000)}, "stateOverrides": overrides, "calls": [read_deployer, read]},
    ]},
)
before = int(rpc("stave", "eth_call", [read_deployer, "latest"]), 16)
assert int(answers["stave"][1]["calls"][0]["returnData"], 16) == before + 5, answers["stave"][1]
assert int(answers["stave"][1]["calls"][1]["returnData"], 16) == 12345, answers["stave"][1]
# An ETH transfer, traced as a log from 0xEeee...EEeE.
eth = {"from": holder.address, "to": stranger, "value": hex(10**15)}
answers = simulate_both("a traced ETH transfer", {"blockStateCalls": [{"calls": [eth]}], "traceTransfers": True})
assert answers["stave"][0]["calls"][0]["logs"][0]["address"].lower() == "0x" + "ee" * 20, answers["stave"]
# Refusals, with go-ethereum's codes (Anvil simulates a number below its head): blocks out
# of order, and more blocks than the limit.
for payload, code in [
    ({"blockStateCalls": [{"blockOverrides": {"number": "0x1"}}]}, -38020),
    ({"blockStateCalls": [{"blockOverrides": {"number": "0xffffffffffff"}}]}, -38026),
]:
    try:
        rpc("stave", "eth_simulateV1", [payload, "latest"])
    except RuntimeError as error:
        assert f"'code': {code}" in str(error), error
    else:
        raise AssertionError(f"{payload} was simulated")
print("anvil: eth_simulateV1 answered alike (token transfer, revert, state override, two blocks, traced transfer)")
