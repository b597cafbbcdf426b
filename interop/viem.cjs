// viem against a running `stave node --dev`: the same checks as ethers.mjs.
// Usage: node viem.cjs <viem module dir> <rpc port> <path to StaveToken.bin>
const assert = require('node:assert/strict');
const { createRequire } = require('node:module');
const { readFileSync } = require('node:fs');

const [modules, port, binPath] = process.argv.slice(2);
const load = createRequire(modules + '/');
const viem = load('viem');
const accounts = load('viem/accounts');

async function main() {
  const url = `http://127.0.0.1:${port}`;
  const chain = viem.defineChain({
    id: 1337,
    name: 'stave-dev',
    nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
    rpcUrls: { default: { http: [url], webSocket: [`ws://127.0.0.1:${port}`] } },
  });
  const client = viem.createPublicClient({ chain, transport: viem.http(url), pollingInterval: 200 });
  const mnemonic = 'test test test test test test test test test test test junk';
  const alice = accounts.mnemonicToAccount(mnemonic, { addressIndex: 0 });
  const bob = accounts.mnemonicToAccount(mnemonic, { addressIndex: 1 });
  const wallet = viem.createWalletClient({ account: alice, chain, transport: viem.http(url) });
  assert.equal(await client.getChainId(), 1337);

  const ws = viem.createPublicClient({ chain, transport: viem.webSocket(`ws://127.0.0.1:${port}`) });
  const heads = [];
  const unwatch = ws.watchBlocks({
    onBlock: (block) => heads.push(block.number),
    onError: (error) => console.error('watchBlocks:', error.message),
    emitOnBegin: false,
  });
  // Pending transactions, over the WebSocket (eth_subscribe) and over HTTP (a polled filter).
  const pendingWs = [];
  const pendingHttp = [];
  const unwatchPendingWs = ws.watchPendingTransactions({
    onTransactions: (hashes) => pendingWs.push(...hashes),
    onError: (error) => console.error('watchPendingTransactions (ws):', error.message),
  });
  const unwatchPendingHttp = client.watchPendingTransactions({
    onTransactions: (hashes) => pendingHttp.push(...hashes),
    onError: (error) => console.error('watchPendingTransactions (http):', error.message),
  });
  // Let both install before the first transaction goes in.
  await new Promise((r) => setTimeout(r, 500));

  // ETH transfer.
  const before = await client.getBalance({ address: bob.address });
  const hash = await wallet.sendTransaction({ to: bob.address, value: viem.parseEther('2') });
  const receipt = await client.waitForTransactionReceipt({ hash });
  assert.equal(receipt.status, 'success');
  assert.equal(await client.getBalance({ address: bob.address }), before + viem.parseEther('2'));
  const tx = await client.getTransaction({ hash });
  assert.equal(tx.from.toLowerCase(), alice.address.toLowerCase());
  const block = await client.getBlock({ blockNumber: receipt.blockNumber });
  assert.ok(block.transactions.includes(hash));
  assert.ok(block.baseFeePerGas > 0n);

  // Deploy the ERC-20 and move tokens.
  const abi = viem.parseAbi([
    'constructor(uint256 initialSupply)',
    'function balanceOf(address) view returns (uint256)',
    'function transfer(address to, uint256 value) returns (bool)',
    'event Transfer(address indexed from, address indexed to, uint256 value)',
  ]);
  const bytecode = '0x' + readFileSync(binPath, 'utf8').trim();
  const deployHash = await wallet.deployContract({ abi, bytecode, args: [1000000n] });
  const deployed = await client.waitForTransactionReceipt({ hash: deployHash });
  const token = deployed.contractAddress;
  assert.ok(token);
  assert.equal(await client.readContract({ address: token, abi, functionName: 'balanceOf', args: [alice.address] }), 1000000n);
  const moveHash = await wallet.writeContract({ address: token, abi, functionName: 'transfer', args: [bob.address, 250n] });
  const moved = await client.waitForTransactionReceipt({ hash: moveHash });
  assert.equal(moved.logs.length, 1);
  assert.equal(await client.readContract({ address: token, abi, functionName: 'balanceOf', args: [bob.address] }), 250n);
  const logs = await client.getContractEvents({
    address: token, abi, eventName: 'Transfer', args: { from: alice.address, to: bob.address }, fromBlock: 0n,
  });
  assert.equal(logs.length, 1);
  assert.equal(logs[0].transactionHash, moveHash);
  assert.equal(logs[0].args.value, 250n);

  // A revert is reported as one.
  await assert.rejects(
    client.simulateContract({ account: alice, address: token, abi, functionName: 'transfer', args: [bob.address, 10n ** 30n] }),
    (e) => /revert/i.test(e.message),
  );

  // simulateContract: the result, and the request a wallet then sends as it is.
  const { result, request } = await client.simulateContract({ account: alice, address: token, abi, functionName: 'transfer', args: [bob.address, 1n] });
  assert.equal(result, true);
  const simulated = await wallet.writeContract(request);
  assert.equal((await client.waitForTransactionReceipt({ hash: simulated })).status, 'success');

  // simulateBlocks (eth_simulateV1): a token transfer, one that reverts, an ETH transfer
  // traced as a log; the next block sees the first transfer.
  const held = await client.readContract({ address: token, abi, functionName: 'balanceOf', args: [bob.address] });
  const blocks = await client.simulateBlocks({
    blocks: [
      {
        calls: [
          { account: alice.address, to: token, abi, functionName: 'transfer', args: [bob.address, 7n] },
          { account: alice.address, to: token, abi, functionName: 'transfer', args: [bob.address, 10n ** 30n] },
          { account: alice.address, to: bob.address, value: 5n },
        ],
      },
      { calls: [{ to: token, abi, functionName: 'balanceOf', args: [bob.address] }] },
    ],
    traceTransfers: true,
  });
  assert.equal(blocks.length, 2);
  assert.equal(blocks[1].number, blocks[0].number + 1n);
  assert.equal(blocks[1].parentHash, blocks[0].hash);
  const [moveCall, revertCall, ethCall] = blocks[0].calls;
  assert.equal(moveCall.status, 'success');
  assert.equal(moveCall.result, true);
  const [moveLog] = viem.parseEventLogs({ abi, logs: moveCall.logs });
  assert.equal(moveLog.args.value, 7n);
  assert.equal(moveLog.blockHash, blocks[0].hash);
  assert.equal(moveLog.transactionHash, blocks[0].transactions[0]);
  assert.equal(revertCall.status, 'failure');
  assert.match(revertCall.error.message, /revert/i);
  assert.equal(ethCall.logs.length, 1);
  assert.equal(ethCall.logs[0].address, '0xeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee');
  assert.equal(blocks[0].gasUsed, moveCall.gasUsed + revertCall.gasUsed + ethCall.gasUsed);
  assert.equal(blocks[1].calls[0].result, held + 7n);
  // Nothing was sent: the balance is as it was.
  assert.equal(await client.readContract({ address: token, abi, functionName: 'balanceOf', args: [bob.address] }), held);

  // The node's own accounts sign (a JSON-RPC account: eth_sendTransaction).
  const [first] = await wallet.request({ method: 'eth_accounts' });
  assert.equal(first.toLowerCase(), alice.address.toLowerCase());
  const unlocked = viem.createWalletClient({ account: alice.address, chain, transport: viem.http(url) });
  const unlockedHash = await unlocked.sendTransaction({ to: bob.address, value: 1n });
  assert.equal((await client.waitForTransactionReceipt({ hash: unlockedHash })).status, 'success');

  // Messages and EIP-712 typed data the node's account signs verify as its own.
  const message = 'hello from a dapp';
  const messageSignature = await unlocked.signMessage({ message });
  assert.ok(await viem.verifyMessage({ address: alice.address, message, signature: messageSignature }), 'personal_sign');
  const typed = {
    domain: { name: 'Stave', version: '1', chainId: 1337, verifyingContract: token },
    types: { Mail: [{ name: 'to', type: 'address' }, { name: 'contents', type: 'string' }] },
    primaryType: 'Mail',
    message: { to: bob.address, contents: 'hi' },
  };
  const typedSignature = await unlocked.signTypedData(typed);
  assert.ok(await viem.verifyTypedData({ address: alice.address, ...typed, signature: typedSignature }), 'eth_signTypedData_v4');
  assert.equal(typedSignature, await alice.signTypedData(typed));

  // Test actions, as against Anvil: mining on request and the block clock.
  const test = viem.createTestClient({ chain, mode: 'anvil', transport: viem.http(url) });
  const start = await client.getBlockNumber({ cacheTime: 0 });
  await test.mine({ blocks: 3 });
  assert.ok((await client.getBlockNumber({ cacheTime: 0 })) >= start + 3n, "mine({ blocks: 3 })");
  const stamp = BigInt(Math.floor(Date.now() / 1000) + 86400);
  await test.setNextBlockTimestamp({ timestamp: stamp });
  await test.mine({ blocks: 1 });
  assert.equal((await client.getBlock()).timestamp >= stamp, true, 'setNextBlockTimestamp');
  await test.setAutomine(true);
  assert.equal(await test.request({ method: 'anvil_getAutomine' }), true);
  await test.setAutomine(false);

  // Snapshots, state edits and impersonation, as a test suite uses them against Anvil.
  const whale = '0x00000000000000000000000000000000000cafe0';
  const snapshot = await test.snapshot();
  await test.setBalance({ address: whale, value: 10n ** 18n });
  assert.equal(await client.getBalance({ address: whale }), 10n ** 18n, 'setBalance');
  await test.impersonateAccount({ address: whale });
  const impersonated = viem.createWalletClient({ account: whale, chain, transport: viem.http(url) });
  const whaleHash = await impersonated.sendTransaction({ to: bob.address, value: 7n });
  const whaleReceipt = await client.waitForTransactionReceipt({ hash: whaleHash });
  assert.equal(whaleReceipt.status, 'success', 'an impersonated send');
  assert.equal(whaleReceipt.from, whale);
  await test.stopImpersonatingAccount({ address: whale });
  await test.revert({ id: snapshot });
  assert.equal(await client.getBalance({ address: whale }), 0n, 'revert');
  assert.equal(await client.getTransactionReceipt({ hash: whaleHash }).catch(() => null), null, 'a reverted receipt');

  // Errors clients expect.
  await assert.rejects(wallet.sendTransaction({ to: bob.address, value: 1n, nonce: 0 }), (e) => /nonce too low|nonce.*lower/i.test(e.message));
  const nonce = await client.getTransactionCount({ address: alice.address, blockTag: 'pending' });
  const wrongChain = await alice.signTransaction({
    to: bob.address, value: 1n, nonce, chainId: 1, gas: 21000n, maxFeePerGas: 10n ** 10n, maxPriorityFeePerGas: 1n, type: 'eip1559',
  });
  await assert.rejects(client.sendRawTransaction({ serializedTransaction: wrongChain }), (e) => /invalid chain id/i.test(e.message));
  const broke = viem.createWalletClient({ account: accounts.privateKeyToAccount(accounts.generatePrivateKey()), chain, transport: viem.http(url) });
  await assert.rejects(broke.sendTransaction({ to: bob.address, value: 1n, gas: 21000n }), (e) => /insufficient funds/i.test(e.message));

  for (let i = 0; i < 50 && heads.length === 0; i++) await new Promise((r) => setTimeout(r, 100));
  assert.ok(heads.length > 0, 'no newHeads notification');
  for (let i = 0; i < 50 && !(pendingWs.includes(hash) && pendingHttp.includes(hash)); i++) {
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.ok(pendingWs.includes(hash), 'the transfer was not reported to the pending subscription');
  assert.ok(pendingHttp.includes(hash), 'the transfer was not reported to the pending filter');
  unwatch();
  unwatchPendingWs();
  unwatchPendingHttp();
  console.log(JSON.stringify({ client: 'viem', ok: true, heads: heads.length, pending: [pendingWs.length, pendingHttp.length] }));
  process.exit(0);
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
