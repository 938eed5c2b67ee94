// End-to-end test of the console in headless Chromium (Debian's
// /usr/bin/chromium, driven by playwright-core). Run by the Go test
// TestBrowser, which fills a real store through the Processor, serves the
// console and checks the store afterwards. Environment:
//   CONSOLE_URL      the console's address
//   CONSOLE_TOKEN    its token
//   ARTIFACTS        where screenshots go
//   EXPECT_MARKERS   records the map must show
//   EXPECT_BOX       records the box (-10,35)-(20,60) must leave in the list
//   HOSTILE_ID       the hostile event id
// Prints one line per step and exits 1 at the first failure.
import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const url = process.env.CONSOLE_URL;
const token = process.env.CONSOLE_TOKEN;
const artifacts = process.env.ARTIFACTS;
const expectMarkers = parseInt(process.env.EXPECT_MARKERS, 10);
const expectBox = parseInt(process.env.EXPECT_BOX, 10);
const hostileID = process.env.HOSTILE_ID;

const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking',
  '--disable-component-update', '--disable-sync'];

function check(cond, msg) {
  if (!cond) throw new Error(msg);
}

const profile = mkdtempSync(join(tmpdir(), 'geodlq-chromium-'));
const ctx = await chromium.launchPersistentContext(profile, {
  executablePath: '/usr/bin/chromium', headless: true, args: FLAGS, viewport: { width: 1440, height: 900 },
});
const dialogs = [];
const errors = [];
// watch records a page's dialogs and errors; expected lists the HTTP
// statuses whose failed loads the step provokes on purpose.
const watch = (page, expected = []) => {
  page.on('dialog', (d) => { dialogs.push(d.message()); d.dismiss().catch(() => {}); });
  page.on('pageerror', (e) => errors.push('pageerror: ' + e.message));
  page.on('console', (m) => {
    if (m.type() !== 'error') return;
    if (expected.some((s) => m.text().includes('status of ' + s))) return;
    errors.push('console: ' + m.text() + ' at ' + JSON.stringify(m.location()));
  });
};
await ctx.addInitScript(() => {
  window.__csp = [];
  document.addEventListener('securitypolicyviolation', (e) => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));
});
let step = '';
const shot = (page, name) => page.screenshot({ path: join(artifacts, name + '.png') });
const log = (msg) => console.log(JSON.stringify({ step, ok: msg }));

try {
  const page = await ctx.newPage();
  watch(page);

  step = 'load';
  await page.goto(url + '#token=' + encodeURIComponent(token));
  await page.waitForSelector('body[data-ready=true]', { timeout: 30000 });
  check(!page.url().includes('token='), 'the token is removed from the address bar');
  log('page loaded, token taken from the fragment');

  step = 'markers';
  await page.waitForFunction((n) => document.getElementById('map-info').dataset.located === String(n), expectMarkers, { timeout: 20000 });
  const drawn = await page.evaluate(() => {
    let n = document.querySelectorAll('#map path.geodlq-marker').length;
    for (const c of document.querySelectorAll('#map .geodlq-cluster')) n += parseInt(c.dataset.count, 10);
    return n;
  });
  check(drawn === expectMarkers, `the map draws ${drawn} records, want ${expectMarkers}`);
  await shot(page, '01-map');
  log(`${drawn} records on the map`);

  step = 'hostile';
  const row = page.locator('#rows tr.rec').filter({ has: page.locator('td', { hasText: '<script>window.__xss=1</script>' }) });
  await row.first().waitFor({ timeout: 10000 });
  await row.first().click();
  await page.waitForFunction((id) => document.getElementById('rec-title').textContent.startsWith(id), hostileID);
  await page.click('#payload-show');
  await page.waitForFunction(() => document.getElementById('payload-text').textContent.includes('onerror'));
  const hostile = await page.evaluate(() => ({
    xss: window.__xss,
    imgs: document.querySelectorAll('img[src="x"], img[onerror]').length,
    scripts: [...document.scripts].map((s) => s.src),
    title: document.getElementById('rec-title').textContent,
    props: document.getElementById('payload-props').textContent,
    listText: document.getElementById('rows').textContent,
  }));
  check(hostile.xss === undefined, 'an injected script ran: window.__xss = ' + hostile.xss);
  check(hostile.imgs === 0, 'an injected <img> became an element');
  check(hostile.scripts.length === 1 && hostile.scripts[0].endsWith('/assets/app.js'), 'scripts on the page: ' + hostile.scripts);
  check(hostile.title.startsWith(hostileID), 'the event id is shown as text: ' + hostile.title);
  check(hostile.props.includes('<img src=x onerror=\\"window.__xss=3\\">'), 'the property is shown as text: ' + hostile.props);
  check(hostile.listText.includes('s3://provider-x/<b>bold</b>'), 'the source is shown as text');
  await shot(page, '02-hostile-as-text');
  log('hostile strings rendered as text; nothing ran');

  step = 'bowtie';
  await page.click('#rec-close');
  const bowtie = page.locator('#map path.geodlq-marker[data-event="evt-bowtie"]');
  await bowtie.waitFor({ timeout: 10000 });
  await bowtie.click({ force: true });
  await page.waitForFunction(() => document.getElementById('rec-reason').textContent === 'Self-intersection[10.5 10.5]', null, { timeout: 10000 });
  await page.waitForFunction(() => document.querySelectorAll('#rec-map path.fault-segment').length === 2, null, { timeout: 10000 });
  const marks = await page.evaluate(() => [...document.querySelectorAll('#rec-markers li')].map((l) => l.textContent));
  check(marks.some((m) => m.includes('segment 0→1')) && marks.some((m) => m.includes('segment 2→3')), 'both crossing segments listed: ' + marks);
  await page.click('#rec-repairs button >> text=Preview make-valid');
  await page.waitForSelector('#repair-out .good', { timeout: 15000 });
  const preview = await page.textContent('#repair-out');
  check(preview.includes('MultiPolygon') && preview.includes('passes the check'), 'repair preview: ' + preview);
  await page.waitForTimeout(300);
  await shot(page, '03-bowtie-both-segments');
  log('the bowtie shows its reason and both crossing segments; MakeValid preview passes');

  step = 'box';
  await page.click('#rec-close');
  const [a, b] = await page.evaluate(() => {
    const m = window.geodlqMap;
    const p1 = m.latLngToContainerPoint([60, -10]), p2 = m.latLngToContainerPoint([35, 20]);
    const r = document.getElementById('map').getBoundingClientRect();
    return [[r.left + p1.x, r.top + p1.y], [r.left + p2.x, r.top + p2.y]];
  });
  await page.click('#draw-box');
  await page.mouse.move(a[0], a[1]);
  await page.mouse.down();
  await page.mouse.move((a[0] + b[0]) / 2, (a[1] + b[1]) / 2, { steps: 4 });
  await page.mouse.move(b[0], b[1], { steps: 4 });
  await page.mouse.up();
  await page.waitForFunction((n) => document.querySelectorAll('#rows tr.rec').length === n, expectBox, { timeout: 10000 });
  const boxed = await page.evaluate(() => [...document.querySelectorAll('#rows tr.rec')].map((r) => r.dataset.event).sort());
  check(boxed.every((id) => id.startsWith('evt-eu-')), 'the box keeps the European records: ' + boxed);
  await shot(page, '04-box-filter');
  await page.click('#clear-box');
  await page.waitForFunction((n) => document.querySelectorAll('#rows tr.rec').length > n, expectBox, { timeout: 10000 });
  await page.fill('#f-q', 'evt-eu-2');
  await page.click('#filters button[type=submit]');
  await page.waitForFunction(() => document.querySelectorAll('#rows tr.rec').length === 1, null, { timeout: 10000 });
  await page.click('#reset-filters');
  await page.waitForFunction((n) => document.querySelectorAll('#rows tr.rec').length > n, expectBox, { timeout: 10000 });
  check(await page.inputValue('#f-q') === '', 'Reset clears the filters');
  log(`the box narrows the list to ${boxed.length} records; the text filter and Reset work`);

  step = 'replay';
  await page.click('#rows tr.rec[data-event="evt-bowtie"]');
  await page.waitForFunction(() => document.getElementById('rec-reason').textContent.startsWith('Self-intersection'));
  await page.click('#rec-replay');
  await page.waitForSelector('#job-dialog[open]');
  check(await page.isChecked('#repair-make-valid'), 'make-valid is proposed for an invalid geometry');
  check(await page.isDisabled('#job-confirm'), 'nothing to confirm before the dry run');
  await page.click('#job-dry');
  await page.waitForSelector('#job-status[data-state=done][data-dry=true]', { timeout: 20000 });
  check((await page.textContent('#job-counts')).includes('would_repair 1'), 'dry run: ' + await page.textContent('#job-counts'));
  await page.click('#job-confirm');
  await page.waitForSelector('#job-status[data-state=done][data-dry=false]', { timeout: 20000 });
  check((await page.textContent('#job-counts')).includes('repaired 1'), 'replay: ' + await page.textContent('#job-counts'));
  await shot(page, '05-replay-make-valid');
  await page.click('#job-close');
  await page.waitForFunction(() => !document.querySelector('#rows tr.rec[data-event="evt-bowtie"]'), null, { timeout: 10000 });
  log('replayed with make-valid after a dry run; the record left the list');

  step = 'discard';
  await page.click('#rows tr.rec[data-event="evt-eu-1"]');
  await page.waitForFunction(() => document.getElementById('rec-title').textContent.startsWith('evt-eu-1'));
  await page.click('#rec-discard');
  await page.click('#job-dry');
  await page.waitForSelector('#job-status[data-state=done][data-dry=true]', { timeout: 20000 });
  check((await page.textContent('#job-counts')).includes('would_discard 1'), 'discard dry run: ' + await page.textContent('#job-counts'));
  await page.click('#job-confirm');
  await page.waitForSelector('#job-status[data-state=done][data-dry=false]', { timeout: 20000 });
  check((await page.textContent('#job-counts')).includes('discarded 1'), 'discard: ' + await page.textContent('#job-counts'));
  await page.click('#job-close');
  await page.waitForFunction(() => !document.querySelector('#rows tr.rec[data-event="evt-eu-1"]'), null, { timeout: 10000 });
  await shot(page, '06-after-discard');
  log('discarded one record after a dry run');

  step = 'no token';
  const anon = await ctx.newPage(); // a new tab: its own sessionStorage, no token
  watch(anon, [401]);
  await anon.goto(url);
  await anon.waitForSelector('body[data-ready=true]', { timeout: 30000 });
  check(await anon.isVisible('#unlock'), 'a page without the token offers to enter it');
  const refused = await anon.evaluate(async () => {
    const r = await fetch('/api/jobs', { method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ action: 'discard', dry_run: true, records: [{ destination: 'parcels.poison.dlt', id: '1' }] }) });
    return { status: r.status, type: r.headers.get('content-type'), body: await r.json() };
  });
  check(refused.status === 401 && refused.type === 'application/problem+json', 'a request without the token: ' + JSON.stringify(refused));
  await anon.click('#rows tr.rec >> nth=0');
  await anon.click('#rec-discard');
  await anon.waitForSelector('#token-dialog[open]');
  check(!(await anon.isVisible('#job-dialog')), 'no action dialog without the token');
  await shot(anon, '07-no-token');
  log('a mutating request without the token is refused (401 problem details)');

  step = 'page hygiene';
  const csp = await page.evaluate(() => window.__csp);
  check(csp.length === 0, 'CSP violations: ' + csp);
  check(dialogs.length === 0, 'dialogs opened: ' + dialogs);
  check(errors.length === 0, 'page errors: ' + errors.join('; '));
  log('no CSP violation, no dialog, no page error');
} catch (err) {
  console.log(JSON.stringify({ step, error: err.message }));
  try {
    for (const p of ctx.pages()) await p.screenshot({ path: join(artifacts, 'failure-' + step.replace(/\W+/g, '-') + '-' + ctx.pages().indexOf(p) + '.png') });
  } catch { /* best effort */ }
  await ctx.close();
  rmSync(profile, { recursive: true, force: true });
  process.exit(1);
}
await ctx.close();
rmSync(profile, { recursive: true, force: true });
