"""web3.py against a running `stave node --dev`: the same checks as ethers.mjs.

Usage: python web3py.py <rpc port> <path to StaveToken.bin>
"""

import asyncio
import json
import sys

from eth_account import Account
from web3 import AsyncWeb3, Web3, WebSocketProvider
from web3.exceptions import ContractLogicError, Web3RPCError

port, bin_path = sys.argv[1], sys.argv[2]
url = f"http://127.0.0.1:{port}"
w3 = Web3(Web3.HTTPProvider(url))
Account.enable_unaudited_hdwallet_features()
MNEMONIC = "test test test test test test test test test test test junk"
alice = Account.from_mnemonic(MNEMONIC, account_path="m/44'/60'/0'/0/0")
bob = Account.from_mnemonic(MNEMONIC, account_path="m/44'/60'/0'/0/1")
assert w3.eth.chain_id == 1337


def send(account, tx):
    tx = {
        "chainId": 1337,
        "nonce": w3.eth.get_transaction_count(account.address, "pending"),
        "maxFeePerGas": w3.eth.gas_price * 2,
        "maxPriorityFeePerGas": w3.eth.max_priority_fee,
        **tx,
    }
    if "gas" not in tx:
        tx["gas"] = w3.eth.estimate_gas({**tx, "from": account.address})
    signed = account.sign_transaction(tx)
    tx_hash = w3.eth.send_raw_transaction(signed.raw_transaction)
    return w3.eth.wait_for_transaction_receipt(tx_hash, timeout=30, poll_latency=0.2)


async def first_head():
    async with AsyncWeb3(WebSocketProvider(f"ws://127.0.0.1:{port}")) as ws:
        await ws.eth.subscribe("newHeads")
        async for message in ws.socket.process_subscriptions():
            return message["result"]["number"]


# ETH transfer.
before = w3.eth.get_balance(bob.address)
receipt = send(alice, {"to": bob.address, "value": Web3.to_wei(3, "ether")})
assert receipt.status == 1
assert w3.eth.get_balance(bob.address) == before + Web3.to_wei(3, "ether")
tx = w3.eth.get_transaction(receipt.transactionHash)
assert tx["from"] == alice.address
block = w3.eth.get_block(receipt.blockNumber)
assert receipt.transactionHash in block.transactions
assert block.baseFeePerGas > 0

# Deploy the ERC-20 and move tokens.
ABI = [
    {"type": "constructor", "inputs": [{"name": "initialSupply", "type": "uint256"}], "stateMutability": "nonpayable"},
    {"type": "function", "name": "balanceOf", "inputs": [{"name": "", "type": "address"}],
     "outputs": [{"name": "", "type": "uint256"}], "stateMutability": "view"},
    {"type": "function", "name": "transfer", "inputs": [{"name": "to", "type": "address"}, {"name": "value", "type": "uint256"}],
     "outputs": [{"name": "", "type": "bool"}], "stateMutability": "nonpayable"},
    {"type": "event", "name": "Transfer", "anonymous": False, "inputs": [
        {"name": "from", "type": "address", "indexed": True},
        {"name": "to", "type": "address", "indexed": True},
        {"name": "value", "type": "uint256", "indexed": False}]},
]
bytecode = "0x" + open(bin_path).read().strip()
factory = w3.eth.contract(abi=ABI, bytecode=bytecode)
deploy = factory.constructor(1_000_000).build_transaction({"from": alice.address, "nonce": 0, "chainId": 1337})
deployed = send(alice, {"data": deploy["data"]})
token = w3.eth.contract(address=deployed.contractAddress, abi=ABI)
assert w3.eth.get_code(token.address) != b""
assert token.functions.balanceOf(alice.address).call() == 1_000_000
# Filters polled over HTTP see what happens after they are installed.
transfer_filter = token.events.Transfer.create_filter(from_block="latest")
block_filter = w3.eth.filter("latest")
call = token.functions.transfer(bob.address, 250).build_transaction({"from": alice.address, "nonce": 0, "chainId": 1337})
moved = send(alice, {"to": token.address, "data": call["data"]})
assert token.functions.balanceOf(bob.address).call() == 250
events = token.events.Transfer().process_receipt(moved)
assert len(events) == 1 and events[0].args.to == bob.address
entries = transfer_filter.get_new_entries()
assert len(entries) == 1 and entries[0].args.to == bob.address, entries
assert moved.blockHash in block_filter.get_new_entries()
assert transfer_filter.get_new_entries() == []
assert w3.eth.uninstall_filter(block_filter.filter_id)
logs = token.events.Transfer().get_logs(from_block=0, argument_filters={"from": alice.address, "to": bob.address})
assert len(logs) == 1 and logs[0].transactionHash == moved.transactionHash

# A revert is reported as one.
try:
    token.functions.transfer(bob.address, 10**30).call({"from": alice.address})
    raise AssertionError("the transfer should revert")
except ContractLogicError:
    pass


def refused(raw, pattern):
    try:
        w3.eth.send_raw_transaction(raw)
    except Web3RPCError as error:
        assert pattern in str(error), error
        return
    raise AssertionError(f"expected an error matching {pattern!r}")


base = {"to": bob.address, "value": 1, "gas": 21000, "maxFeePerGas": 10**10, "maxPriorityFeePerGas": 1}
refused(alice.sign_transaction({**base, "nonce": 0, "chainId": 1337}).raw_transaction, "nonce too low")
pending = w3.eth.get_transaction_count(alice.address, "pending")
refused(alice.sign_transaction({**base, "nonce": pending, "chainId": 1}).raw_transaction, "invalid chain id")
refused(Account.create().sign_transaction({**base, "nonce": 0, "chainId": 1337}).raw_transaction, "insufficient funds")

head = asyncio.run(asyncio.wait_for(first_head(), timeout=10))
assert head > 0
print(json.dumps({"client": "web3.py", "ok": True, "head": head}))
