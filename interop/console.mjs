// The node's web console in headless Chromium (Debian's, driven by puppeteer-core), on a
// dev node under load: the head advances on the page, the TPS chart fills with what the
// node includes, a transaction found by its hash shows its receipt and call trace, an
// account its balance; the console's JSON-RPC refuses anything but reads. Every request
// the page makes must succeed and it must log no error. Screenshots go to <shots dir>.
// Usage: node console.mjs <puppeteer-core module dir> <metrics port> <shots dir>
import { createRequire } from 'node:module';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import assert from 'node:assert/strict';

const [modules, metricsPort, shots] = process.argv.slice(2);
const puppeteer = createRequire(modules + '/')('puppeteer-core');
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

const profile = mkdtempSync(join(tmpdir(), 'stave-console-'));
const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
  userDataDir: profile,
  args: ['--headless=new', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
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

  assert.deepEqual(failed, [], `failed requests: ${failed}`);
  assert.deepEqual(errors, [], `console errors: ${errors}`);
  console.log(JSON.stringify({ client: 'console', ok: true, head: first, tx: hash, shots }));
} finally {
  await browser.close();
  rmSync(profile, { recursive: true, force: true });
}
