// Measures the console's page load in headless Chromium: for each of
// LOADS loads, the milliseconds from navigation until the page is ready
// (config, overview, first list page and map markers shown). Run by the
// Go benchmark BenchmarkPageLoadBrowser. Prints a JSON array.
import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const url = process.env.CONSOLE_URL;
const loads = parseInt(process.env.LOADS || '5', 10);
const profile = mkdtempSync(join(tmpdir(), 'geodlq-chromium-'));
const ctx = await chromium.launchPersistentContext(profile, {
  executablePath: '/usr/bin/chromium', headless: true, viewport: { width: 1440, height: 900 },
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
});
const out = [];
try {
  for (let i = 0; i < loads; i++) {
    const page = await ctx.newPage();
    const t0 = Date.now();
    await page.goto(url, { waitUntil: 'commit' });
    await page.waitForSelector('body[data-ready=true]', { timeout: 120000 });
    await page.waitForFunction(() => document.querySelectorAll('#rows tr.rec').length > 0 &&
      document.querySelectorAll('#map .geodlq-cluster, #map path.geodlq-marker').length > 0, null, { timeout: 120000 });
    out.push(Date.now() - t0);
    await page.close();
  }
} finally {
  await ctx.close();
  rmSync(profile, { recursive: true, force: true });
}
console.log(JSON.stringify(out));
