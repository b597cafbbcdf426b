"""web3.py against a `stave node` whose genesis restricts deployment to permitted
accounts (`stave genesis new --committee 1 --restrict-deployers`), none permitted: a
deployment is refused when sent, the error naming the rule; a transfer still goes
through.

Usage: python permissions.py <rpc port> <path to StaveToken.bin> <a funded account's key>
"""

import sys

from eth_account import Account
from web3 import Web3
from web3.exceptions import Web3RPCError

port, bin_path, key = sys.argv[1], sys.argv[2], sys.argv[3]
w3 = Web3(Web3.HTTPProvider(f"http://127.0.0.1:{port}"))
bob = Account.from_key(key)
assert w3.eth.chain_id == 1337


def signed(tx):
    tx = {
        "chainId": 1337,
        "nonce": w3.eth.get_transaction_count(bob.address, "pending"),
        "maxFeePerGas": w3.eth.gas_price * 2,
        "maxPriorityFeePerGas": w3.eth.max_priority_fee,
        "gas": 3_000_000,
        **tx,
    }
    return bob.sign_transaction(tx).raw_transaction


with open(bin_path) as f:
    bytecode = f.read().strip()
supply = (1000).to_bytes(32, "big").hex()
try:
    w3.eth.send_raw_transaction(signed({"data": "0x" + bytecode + supply}))
    raise SystemExit("web3.py: a deployment from an account without the right was accepted")
except Web3RPCError as error:
    assert "may not deploy contracts" in str(error), error

tx_hash = w3.eth.send_raw_transaction(signed({"to": bob.address, "value": 1, "gas": 21_000}))
receipt = w3.eth.wait_for_transaction_receipt(tx_hash, timeout=30, poll_latency=0.2)
assert receipt.status == 1
print("web3.py: permissions ok")
