// ethers v6: signs EIP-155 legacy transfers with nonces 0..txs on one thread.
// Usage: node ethers_sign.mjs NODE_MODULES KEY TO VALUE GAS GAS_PRICE CHAIN_ID TXS RUNS OUT
// Prints the median tx/s of RUNS timed passes (after one untimed warm-up pass, for the
// JIT) and writes the last pass to OUT, one 0x-hex tx per line.
//
// Uses ethers' synchronous core (Transaction + SigningKey) rather than the async
// Wallet.signTransaction, which only adds address resolution: ethers' best case.
import { createRequire } from "node:module";
import { writeFileSync } from "node:fs";
import { join } from "node:path";

const [modules, key, to, value, gas, gasPrice, chainId, txs, runs, out] = process.argv.slice(2);
const { SigningKey, Transaction } = createRequire(join(modules, "ethers", "package.json"))("ethers");
const signingKey = new SigningKey(key);
const count = Number(txs);
const signed = new Array(count);
const rates = [];
for (let run = -1; run < Number(runs); run++) {
    const start = process.hrtime.bigint();
    for (let nonce = 0; nonce < count; nonce++) {
        const tx = Transaction.from({
            type: 0,
            chainId: BigInt(chainId),
            nonce,
            gasPrice: BigInt(gasPrice),
            gasLimit: BigInt(gas),
            to,
            value: BigInt(value),
            data: "0x",
        });
        tx.signature = signingKey.sign(tx.unsignedHash);
        signed[nonce] = tx.serialized;
    }
    const seconds = Number(process.hrtime.bigint() - start) / 1e9;
    if (run >= 0) rates.push(count / seconds);
}
rates.sort((a, b) => a - b);
writeFileSync(out, signed.join("\n") + "\n");
console.log(Math.round(rates[Math.floor(rates.length / 2)]));
