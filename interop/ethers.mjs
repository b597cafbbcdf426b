// ethers v6 against a running `stave node --dev`: deploy the repo's ERC-20, transfer ETH
// and tokens, read balances, receipts and logs, subscribe to new heads, and check the
// errors for a stale nonce, a wrong chain id and an unfunded sender.
// Usage: node ethers.mjs <ethers module dir> <rpc port> <path to StaveToken.bin>
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';

const [modules, port, binPath] = process.argv.slice(2);
const require = createRequire(modules + '/');
const { ethers } = require('ethers');

const url = `http://127.0.0.1:${port}`;
// No client-side cache: ethers answers a repeated call from a 250 ms cache by default,
// which with 200 ms blocks returns the state before the block just waited for.
const provider = new ethers.JsonRpcProvider(url, undefined, { staticNetwork: true, pollingInterval: 200, cacheTimeout: -1 });
const mnemonic = 'test test test test test test test test test test test junk';
const wallet = (i) => ethers.HDNodeWallet.fromPhrase(mnemonic, undefined, `m/44'/60'/0'/0/${i}`).connect(provider);
const alice = wallet(0);
const bob = wallet(1);

const step = (name) => console.error(`ethers: ${name}`);
const network = await provider.getNetwork();
assert.equal(network.chainId, 1337n);

step('Subscribe to new heads');
// Subscribe to new heads over WebSocket before sending anything.
const ws = new ethers.WebSocketProvider(`ws://127.0.0.1:${port}`);
const heads = [];
await ws.on('block', (number) => heads.push(number));

step('ETH transfer');
// ETH transfer.
const before = await provider.getBalance(bob.address);
const sent = await alice.sendTransaction({ to: bob.address, value: ethers.parseEther('1.5') });
const receipt = await sent.wait();
assert.equal(receipt.status, 1);
assert.equal(await provider.getBalance(bob.address), before + ethers.parseEther('1.5'));
const fetched = await provider.getTransaction(sent.hash);
assert.equal(fetched.from, alice.address);
assert.equal(fetched.blockNumber, receipt.blockNumber);
const block = await provider.getBlock(receipt.blockNumber);
assert.ok(block.transactions.includes(sent.hash));
assert.ok(block.baseFeePerGas > 0n);

step('Deploy the ERC-20');
// Deploy the ERC-20 and move tokens.
const abi = [
  'constructor(uint256 initialSupply)',
  'function balanceOf(address) view returns (uint256)',
  'function transfer(address to, uint256 value) returns (bool)',
  'event Transfer(address indexed from, address indexed to, uint256 value)',
];
const bytecode = '0x' + readFileSync(binPath, 'utf8').trim();
const factory = new ethers.ContractFactory(abi, bytecode, alice);
const token = await factory.deploy(1_000_000n);
await token.waitForDeployment();
const tokenAddress = await token.getAddress();
assert.notEqual(await provider.getCode(tokenAddress), '0x');
assert.equal(await token.balanceOf(alice.address), 1_000_000n);
const move = await token.transfer(bob.address, 250n);
const moved = await move.wait();
assert.equal(await token.balanceOf(bob.address), 250n);
const parsed = moved.logs.map((log) => token.interface.parseLog(log));
assert.equal(parsed.length, 1);
assert.equal(parsed[0].name, 'Transfer');
assert.equal(parsed[0].args.to, bob.address);
const logs = await token.queryFilter(token.filters.Transfer(alice.address, bob.address), 0, 'latest');
assert.equal(logs.length, 1);
assert.equal(logs[0].transactionHash, move.hash);

step('A revert is reported');
// A revert is reported as one.
await assert.rejects(token.transfer.staticCall(bob.address, 10n ** 30n), (e) => e.code === 'CALL_EXCEPTION');

step('Errors clients expect');
// Errors clients expect.
const stale = await alice.signTransaction(await alice.populateTransaction({ to: bob.address, value: 1n, nonce: 0 }));
await assert.rejects(provider.broadcastTransaction(stale), (e) => e.code === 'NONCE_EXPIRED' || /nonce too low/.test(e.message));
const otherChain = ethers.Wallet.fromPhrase(mnemonic);
const wrongChain = await otherChain.signTransaction({
  to: bob.address, value: 1n, nonce: await provider.getTransactionCount(alice.address, 'pending'),
  chainId: 1n, gasLimit: 21000n, maxFeePerGas: 10n ** 10n, maxPriorityFeePerGas: 1n, type: 2,
});
await assert.rejects(provider.broadcastTransaction(wrongChain), (e) => /invalid chain id/.test(e.message));
const broke = ethers.Wallet.createRandom().connect(provider);
await assert.rejects(broke.sendTransaction({ to: bob.address, value: 1n, gasLimit: 21000n }),
  (e) => e.code === 'INSUFFICIENT_FUNDS' || /insufficient funds/.test(e.message));

step('New heads arrived');
// New heads arrived over the subscription.
for (let i = 0; i < 50 && heads.length === 0; i++) await new Promise((r) => setTimeout(r, 100));
assert.ok(heads.length > 0, 'no newHeads notification');
await ws.destroy();
console.log(JSON.stringify({ client: 'ethers', version: ethers.version, ok: true, heads: heads.length }));
