"""eth-account with coincurve: signs EIP-155 legacy transfers with nonces 0..txs on one
thread.

Usage: python eth_account_sign.py KEY TO VALUE GAS GAS_PRICE CHAIN_ID TXS RUNS OUT
Prints the median tx/s of RUNS timed passes (after one untimed warm-up pass) and writes
the last pass to OUT, one 0x-hex tx per line. Fails unless eth-keys signs with coincurve.
"""

import statistics
import sys
import time

from eth_account import Account
from eth_keys.backends import CoinCurveECCBackend, get_backend

key, to, value, gas, gas_price, chain_id, txs, runs, out = sys.argv[1:]
if not isinstance(get_backend(), CoinCurveECCBackend):
    sys.exit(f"eth-keys backend is {type(get_backend()).__name__}, not coincurve")
account = Account.from_key(key)
count = int(txs)
signed = [b""] * count
rates = []
for run in range(-1, int(runs)):
    start = time.perf_counter()
    for nonce in range(count):
        tx = {
            "chainId": int(chain_id),
            "nonce": nonce,
            "gasPrice": int(gas_price),
            "gas": int(gas),
            "to": to,
            "value": int(value),
            "data": b"",
        }
        signed[nonce] = account.sign_transaction(tx).raw_transaction
    seconds = time.perf_counter() - start
    if run >= 0:
        rates.append(count / seconds)
with open(out, "w") as f:
    f.writelines("0x" + bytes(tx).hex() + "\n" for tx in signed)
print(round(statistics.median(rates)))
