// The node's web console in headless Chromium (Debian's, driven by puppeteer-core). On a
// dev node under load (mode `dev`): the head advances on the page, the TPS chart fills
// with what the node includes, a transaction found by its hash shows its receipt and call
// trace, an account its balance. On a validator of a 4-validator testnet (mode
// `testnet`): the head advances and the validators table lists all 4, each with the last
// view it voted in. In both the console's JSON-RPC refuses anything but reads, every
// request the page makes must succeed and it must log no error. Screenshots go to
// <shots dir>.
// Usage: node console.mjs <puppeteer-core module dir> <metrics port> <shots dir> [dev|testnet]
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import assert from 'node:assert/strict';
import { launchChromium } from './chromium.mjs';

const [modules, metricsPort, shots, mode = 'dev'] = process.argv.slice(2);
const base = `http://127.0.0.1:${metricsPort}`;
mkdirSync(shots, { recursive: true });

async function rpc(method, params) {
  const response = await fetch(`${base}/rpc`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }),
  });
  return response.json();
}

// Reads only: a submission is refused, and so is a batch.
const write = await rpc('eth_sendRawTransaction', ['0x00']);
assert.equal(write.error?.code, -32601, JSON.stringify(write));
const batch = await (await fetch(`${base}/rpc`, { method: 'POST', body: '[]' })).json();
assert.equal(batch.error?.code, -32600, JSON.stringify(batch));

const browser = await launchChromium(modules);
const number = (text) => Number(text.replace(/[^0-9.]/g, ''));
try {
  const tab = await browser.newPage();
  await tab.setViewport({ width: 1280, height: 1000 });
  const failed = [];
  const errors = [];
  tab.on('requestfailed', (request) => failed.push(`${request.url()} ${request.failure()?.errorText}`));
  tab.on('response', (response) => {
    if (response.status() >= 400) failed.push(`${response.status()} ${response.url()}`);
  });
  tab.on('console', (message) => { if (message.type() === 'error') errors.push(message.text()); });
  tab.on('pageerror', (error) => errors.push(String(error)));
  await tab.goto(`${base}/`);

  // The head advances on the page.
  await tab.waitForFunction(() => /^\d+$/.test(document.querySelector('#head').textContent), { timeout: 20000 });
  const first = number(await tab.$eval('#head', (e) => e.textContent));
  await tab.waitForFunction((h) => Number(document.querySelector('#head').textContent) > h, { timeout: 20000 }, first);
  if (mode === 'testnet') {
    await checkValidators(tab);
  } else {
    await checkDevNode(tab);
  }
  assert.deepEqual(failed, [], `failed requests: ${failed}`);
  assert.deepEqual(errors, [], `console errors: ${errors}`);
  console.log(JSON.stringify({ client: 'console', mode, ok: true, head: first, shots }));
} finally {
  await browser.closeAndClean();
}

// The validators table lists the testnet's 4, and this node has seen each of them vote.
async function checkValidators(tab) {
  await tab.waitForFunction(() => {
    const rows = [...document.querySelectorAll('#validators tr.validator')];
    return rows.length === 4 && rows.every((row) => /view \d+/.test(row.textContent) && /\d+ views/.test(row.textContent));
  }, { timeout: 30000 });
  await tab.screenshot({ path: join(shots, 'console-testnet.png'), fullPage: true });
}

async function checkDevNode(tab) {
  // The TPS chart has points, and the load shows in it.
  await tab.waitForFunction(() => Number(document.querySelector('#tps').dataset.points || 0) >= 5, { timeout: 30000 });
  await tab.waitForFunction(() => /at most [1-9]/.test(document.querySelector('#tps-now').textContent), { timeout: 30000 });
  await tab.waitForFunction(() => document.querySelectorAll('#stages tr').length >= 2, { timeout: 20000 });
  await tab.screenshot({ path: join(shots, 'console-chain.png'), fullPage: true });

  // A transaction found by its hash shows its receipt and its call trace.
  let hash = null;
  const head = Number.parseInt((await rpc('eth_blockNumber', [])).result, 16);
  for (let n = head; n > 0 && !hash; n--) {
    const block = (await rpc('eth_getBlockByNumber', [`0x${n.toString(16)}`, false])).result;
    hash = block.transactions[0] ?? null;
  }
  assert.ok(hash, 'no transaction on the chain');
  await tab.type('#query', hash);
  await tab.click('#search button');
  await tab.waitForFunction(() => document.querySelector('#receipt-status')?.textContent === 'success', { timeout: 20000 });
  await tab.waitForFunction(() => /"type": "CALL"/.test(document.querySelector('#trace')?.textContent ?? ''), { timeout: 20000 });
  await tab.screenshot({ path: join(shots, 'console-transaction.png'), fullPage: true });

  // Its sender, one click away, shows a balance and a nonce.
  await tab.click('#result-body a[data-kind="account"]');
  await tab.waitForFunction(() => document.querySelector('#result-title').textContent === 'Account', { timeout: 20000 });
  const account = await tab.$eval('#result-body', (e) => e.textContent);
  assert.match(account, /balance\d+\.\d+ ETH/);
  await tab.screenshot({ path: join(shots, 'console-account.png'), fullPage: true });

  // Readable on a phone: nothing wider than the screen.
  await tab.setViewport({ width: 390, height: 844, isMobile: true });
  const overflow = await tab.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `the page is ${overflow}px wider than a phone`);
  await tab.screenshot({ path: join(shots, 'console-phone.png'), fullPage: true });
}
