// Headless Chromium for the browser tests: Debian's (or $CHROMIUM), driven by the
// puppeteer-core in <modules>, with a throwaway profile and nothing that phones home, so
// every request a test sees is one its page made.
import { createRequire } from 'node:module';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

// Starts Chromium; `close()` stops it and removes its profile.
export async function launchChromium(modules) {
  const puppeteer = createRequire(modules + '/')('puppeteer-core');
  const profile = mkdtempSync(join(tmpdir(), 'stave-chromium-'));
  const browser = await puppeteer.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    userDataDir: profile,
    args: ['--headless=new', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  browser.closeAndClean = async () => {
    await browser.close();
    rmSync(profile, { recursive: true, force: true });
  };
  return browser;
}
