// A web page in headless Chromium (Debian's, driven by puppeteer-core) calls a node's
// JSON-RPC from another origin, as a dapp in a browser does: against the dev node (CORS
// `*`) it reads the chain id and a balance; against a node without CORS origins the
// browser refuses the answer. Every request the page makes is accounted for.
// Usage: node browser.mjs <puppeteer-core module dir> <dev rpc port> <rpc port of a node without CORS>
import { createServer } from 'node:http';
import assert from 'node:assert/strict';
import { launchChromium } from './chromium.mjs';

const [modules, devPort, closedPort] = process.argv.slice(2);
const ALICE = '0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266';

// The page: calls the node named in its query string, writes what came back (or the
// error) into #out.
const page = `<!doctype html><html><body><pre id="out">pending</pre><script>
const rpc = new URLSearchParams(location.search).get('rpc');
const call = (method, params) => fetch(rpc, {
  method: 'POST', headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }),
}).then((r) => r.json()).then((r) => r.result);
Promise.all([call('eth_chainId', []), call('eth_getBalance', ['${ALICE}', 'latest'])])
  .then(([chainId, balance]) => { out.textContent = JSON.stringify({ chainId, balance }); })
  .catch((e) => { out.textContent = JSON.stringify({ error: String(e) }); });
</script></body></html>`;
const server = createServer((_, res) => { res.setHeader('content-type', 'text/html'); res.end(page); });
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
// localhost, not 127.0.0.1: another origin than the node's, as a dapp's page is.
const origin = `http://localhost:${server.address().port}`;

const browser = await launchChromium(modules);

/** Opens the page against the node on `port`; what it wrote, and its failed requests. */
async function visit(port) {
  const tab = await browser.newPage();
  const failed = [];
  tab.on('requestfailed', (request) => failed.push(request.url()));
  tab.on('response', (response) => {
    if (response.status() >= 400) failed.push(`${response.status()} ${response.url()}`);
  });
  await tab.goto(`${origin}/?rpc=http://127.0.0.1:${port}`);
  await tab.waitForFunction(() => document.querySelector('#out').textContent !== 'pending', { timeout: 20000 });
  const out = JSON.parse(await tab.$eval('#out', (e) => e.textContent));
  await tab.close();
  return { out, failed };
}

try {
  const open = await visit(devPort);
  assert.deepEqual(open.failed, [], `failed requests: ${open.failed}`);
  assert.equal(open.out.chainId, '0x539', JSON.stringify(open.out));
  assert.ok(BigInt(open.out.balance) > 0n, JSON.stringify(open.out));
  const closed = await visit(closedPort);
  assert.match(closed.out.error ?? '', /Failed to fetch/, JSON.stringify(closed.out));
  console.log(JSON.stringify({ client: 'chromium', ok: true, chainId: open.out.chainId, refusedWithoutCors: true }));
} finally {
  await browser.closeAndClean();
  server.close();
}
