// End-to-end walk of the console as an on-call operator, in headless
// Chromium (Debian's /usr/bin/chromium, driven by playwright-core), on a
// corpus with every failure kind (bowties, NaN vertices, unclosed rings,
// empty geometries, EPSG:3857, metres labelled as degrees, an
// unparseable CRS, a 408,000-vertex geometry…). Run by the Go test
// TestBrowserOperator, which fills the store and checks it afterwards.
// Environment:
//   CONSOLE_URL    the console's address
//   CONSOLE_TOKEN  its token
//   ARTIFACTS      where screenshots go
//   EXPECT_KINDS   the class/reason_kind combinations the corpus holds, comma-separated
//   EXPECT_TOTAL   how many records the store holds
//   SEARCHES       JSON [{q, events}]: words only the events' properties hold, and the events holding them
//   POINTER_URL    a read-only console over the same store, started with a source pointer
//   POINTER        that pointer (/properties/provider)
//   POINTER_SOURCES JSON {event id: its value at the pointer, "" for none}
//   WHERE          JSON {"destination/id": where its fault is, in the CLI's words}, for the records with one
// Steps: every record kind (its detail — the fault located in words, as
// geodlq show prints it, never as raw JSON — and every repair preview,
// failing on any page error or error text); every sort; zoom to fault and wheel
// zoom over it; the failing geometries drawn on the main map; a stale
// answer (Reset then Apply, and Apply then Reset, one answer slowed)
// never replaces a newer one; a bulk replay over a filter whose dialog
// restates the filter and lists would_fail rows first; a text search of
// the events' properties, and one that finds nothing; the console started
// with a source pointer: its Source column, source filter and detail.
// Prints one line per step and exits 1 at the first failure.
import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const url = process.env.CONSOLE_URL;
const token = process.env.CONSOLE_TOKEN;
const artifacts = process.env.ARTIFACTS;
const expectKinds = process.env.EXPECT_KINDS.split(',');
const expectTotal = parseInt(process.env.EXPECT_TOTAL, 10);
const searches = JSON.parse(process.env.SEARCHES);
const pointerURL = process.env.POINTER_URL;
const pointer = process.env.POINTER;
const pointerSources = JSON.parse(process.env.POINTER_SOURCES);
const where = JSON.parse(process.env.WHERE);

const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking',
  '--disable-component-update', '--disable-sync'];

function check(cond, msg) {
  if (!cond) throw new Error(msg);
}

// Text that means the page failed to explain something.
const BROKEN = /is not iterable|is not a function|Cannot read propert|undefined|\[object Object\]|TypeError|SyntaxError|HTTP 5\d\d|store error/;

const profile = mkdtempSync(join(tmpdir(), 'geodlq-chromium-'));
const ctx = await chromium.launchPersistentContext(profile, {
  executablePath: '/usr/bin/chromium', headless: true, args: FLAGS, viewport: { width: 1440, height: 900 },
});
const errors = [];
let step = '';
const shot = (page, name) => page.screenshot({ path: join(artifacts, name + '.png') });
const log = (msg) => console.log(JSON.stringify({ step, ok: msg }));
const noErrors = () => check(errors.length === 0, 'page errors: ' + errors.join('; '));

try {
  const page = await ctx.newPage();
  page.on('pageerror', (e) => errors.push(step + ': pageerror: ' + e.message));
  page.on('console', (m) => {
    // 422: a geometry that cannot be restored, said in the panel.
    if (m.type() === 'error' && !m.text().includes('status of 422')) errors.push(step + ': console: ' + m.text() + ' at ' + JSON.stringify(m.location()));
  });
  page.on('dialog', (d) => { errors.push(step + ': dialog: ' + d.message()); d.dismiss().catch(() => {}); });

  step = 'load';
  await page.goto(url + '#token=' + encodeURIComponent(token));
  await page.waitForSelector('body[data-ready=true]', { timeout: 60000 });
  await page.waitForFunction((n) => document.getElementById('list-count').dataset.total === String(n), expectTotal, { timeout: 20000 });
  check((await page.textContent('#list-count')).includes('of ' + expectTotal + ' matching'), 'the list says the total: ' + await page.textContent('#list-count'));
  await page.waitForTimeout(500);
  await shot(page, 'op-01-overview');
  noErrors();
  log(`loaded; the list says ${expectTotal} matching`);

  step = 'every record kind';
  const rows = await page.evaluate(() => [...document.querySelectorAll('#rows tr.rec')].map((r) => ({
    destination: r.dataset.destination, id: r.dataset.id, event: r.dataset.event,
    kind: r.children[3].textContent + '/' + (r.dataset.kind || ''),
  })));
  check(rows.length === expectTotal, `the first page holds every record: ${rows.length} of ${expectTotal}`);
  const byKind = new Map();
  for (const r of rows) if (!byKind.has(r.kind)) byKind.set(r.kind, r);
  for (const k of expectKinds) check(byKind.has(k), `a record of kind ${k} is listed (${[...byKind.keys()]})`);
  check(byKind.has('invalid_geometry/self_intersection'), `a self-intersection is listed (${[...byKind.keys()]})`);
  for (const [kind, r] of byKind) {
    await page.click(`#rows tr.rec[data-destination="${r.destination}"][data-id="${r.id}"]`);
    await page.waitForFunction(({ d, id }) => {
      const p = document.getElementById('record');
      return p.dataset.destination === d && p.dataset.id === id && p.dataset.loaded === 'true';
    }, { d: r.destination, id: r.id }, { timeout: 20000 });
    const panel = await page.evaluate(() => ({
      reason: document.getElementById('rec-reason').textContent,
      note: document.getElementById('rec-note').textContent,
      markers: document.getElementById('rec-markers').textContent,
      fields: document.getElementById('rec-fields').textContent,
      title: document.getElementById('rec-title').textContent,
      map: !document.getElementById('rec-map').hidden,
    }));
    const all = Object.values(panel).join(' | ');
    check(!BROKEN.test(all), `${kind} (${r.event || r.id}): the panel shows an error: ${all}`);
    // The fault is located in words, the CLI's, never as raw JSON.
    const text = await page.textContent('#record');
    check(!text.includes('{"'), `${kind} (${r.event || r.id}): raw JSON in the panel: ${text}`);
    const at = await page.$$eval('#rec-fields tr', (trs) => trs.filter((tr) => tr.children[0].textContent === 'at').map((tr) => tr.children[1].textContent));
    const want = where[r.destination + '/' + r.id];
    if (want) {
      check(at.length === 1 && at[0] === want, `${kind} (${r.event || r.id}): the fault is at "${want}", the panel says ${JSON.stringify(at)}`);
    } else {
      check(at.length === 0, `${kind} (${r.event || r.id}): no fault, yet the panel says it is at ${JSON.stringify(at)}`);
    }
    if (kind === 'invalid_geometry/self_intersection') {
      check(/^\(-?[0-9.e+-]+ -?[0-9.e+-]+\)( part \d+)? ring \d+ segment \d+-\d+$/.test(at[0]), `a self-intersection is located by ring and segment: ${at[0]}`);
      check(!/-1/.test(at[0].replace(/^\([^)]*\)/, '')), `no index of -1 (none) is shown: ${at[0]}`);
      await page.$$eval('#rec-fields tr', (trs) => trs.find((tr) => tr.children[0].textContent === 'at').scrollIntoView({ block: 'center' }));
      await page.waitForTimeout(300);
      await shot(page, 'op-02-record-where');
      log(`${r.event || r.id}: the fault is at ${at[0]}`);
    }
    check(panel.reason.trim() !== '', `${kind} (${r.event || r.id}): no reason shown`);
    check(!/^Geometry: /.test(panel.note) || kind.startsWith('schema_violation') || kind.startsWith('resource_exhausted'),
      `${kind} (${r.event || r.id}): the geometry did not load: ${panel.note}`);
    const previews = await page.$$eval('#rec-repairs button', (bs) => bs.map((b) => b.textContent));
    for (const label of previews) {
      await page.click(`#rec-repairs button >> text="${label}"`);
      await page.waitForSelector('#repair-out[data-state=done]', { timeout: 30000 });
      const out = await page.textContent('#repair-out');
      check(!BROKEN.test(out) && out.trim() !== '', `${kind} (${r.event || r.id}) ${label}: ${out}`);
    }
    noErrors();
    if (r.event === 'evt-sudan') {
      await page.waitForTimeout(300);
      await shot(page, 'op-02-record-sudan');
    }
  }
  log(`opened ${byKind.size} kinds (${[...byKind.keys()].join(', ')}), every repair preview of each`);

  step = 'every sort';
  const sorts = await page.$$eval('#sort option', (os) => os.map((o) => o.value));
  check(sorts.length >= 8, 'sort choices: ' + sorts);
  for (const sort of sorts) {
    await page.selectOption('#sort', sort);
    await page.waitForFunction(({ n, sort }) => document.getElementById('rows').dataset.sort === sort &&
      document.getElementById('list-count').dataset.total === String(n) &&
      document.querySelectorAll('#rows tr.rec').length === n, { n: expectTotal, sort }, { timeout: 20000 });
    const vs = await page.$$eval('#rows tr.rec', (trs) => trs.map((t) => t.children[6].textContent).filter((v) => v !== '–').map(Number));
    if (sort === '-vertices') check(vs.every((v, i) => i === 0 || vs[i - 1] >= v), 'most vertices first: ' + vs);
    if (sort === 'vertices') check(vs.every((v, i) => i === 0 || vs[i - 1] <= v), 'fewest vertices first: ' + vs);
    if (sort === '-vertices') check(vs[0] > 400000, 'the large geometry first: ' + vs[0]);
    noErrors();
  }
  await page.selectOption('#sort', '-vertices');
  await page.waitForFunction(() => document.getElementById('rows').dataset.sort === '-vertices');
  await shot(page, 'op-03-sorted-by-vertices');
  await page.selectOption('#sort', 'newest');
  await page.waitForFunction(() => document.getElementById('rows').dataset.sort === 'newest');
  log(`${sorts.length} sorts: ${sorts.join(', ')}`);

  step = 'zoom to fault';
  const openEvent = async (ev) => {
    await page.click(`#rows tr.rec[data-event="${ev}"]`);
    await page.waitForFunction((ev) => document.getElementById('record').dataset.loaded === 'true' &&
      document.getElementById('rec-title').textContent.startsWith(ev), ev, { timeout: 20000 });
  };
  // Canada: a loop 0.05° across at one vertex, a dot at the country's
  // zoom; zoomed to the fault, a shape.
  await openEvent('evt-canada');
  const loopPx = () => page.evaluate(() => {
    const m = window.geodlqRecMap;
    const f = m.geodlqFaults.find((x) => x.mk.kind === 'vertex');
    const [x, y] = f.mk.coords[0];
    const a = m.latLngToContainerPoint([y, x]), b = m.latLngToContainerPoint([y + 0.05, x + 0.05]);
    return Math.hypot(a.x - b.x, a.y - b.y);
  });
  const loopWhole = await loopPx();
  check(loopWhole < 10, 'at first the whole country, the loop a dot: ' + loopWhole);
  await page.click('#rec-markers li.k-vertex button');
  await page.waitForFunction(() => document.getElementById('rec-map').dataset.zoomedTo !== undefined);
  const loopZoomed = await loopPx();
  check(loopZoomed > 40, `zoomed to the fault, the loop is ${loopZoomed} px across`);
  // Sudan: two edges across the country cross; zoomed to one, both are
  // long enough to tell apart.
  await openEvent('evt-sudan');
  await page.waitForFunction(() => document.querySelectorAll('#rec-map path.fault-segment').length === 2);
  const segLen = () => page.evaluate(() => {
    const m = window.geodlqRecMap;
    const out = [];
    for (const f of m.geodlqFaults) {
      if (f.mk.kind !== 'segment') continue;
      const [a, b] = f.mk.coords.map(([x, y]) => m.latLngToContainerPoint([y, x]));
      out.push(Math.hypot(a.x - b.x, a.y - b.y));
    }
    return out;
  });
  const z1 = await page.evaluate(() => window.geodlqRecMap.getZoom());
  await page.click('#rec-markers li.k-segment button >> nth=0');
  await page.waitForFunction(() => document.getElementById('rec-map').dataset.zoomedTo !== undefined);
  await page.waitForTimeout(300);
  const z2 = await page.evaluate(() => window.geodlqRecMap.getZoom());
  const zoomed = await segLen();
  console.log(JSON.stringify({ step, zoomFrom: z1, zoomTo: z2 }));
  const mapW = await page.evaluate(() => document.getElementById('rec-map').clientWidth);
  check(zoomed.every((l) => l > mapW / 3), `zoomed to the fault, both crossing segments are long enough to tell apart: ${zoomed} px (map ${mapW} px)`);
  const visible = () => page.evaluate(() => {
    const box = document.getElementById('rec-map').getBoundingClientRect();
    const inside = (r) => r.right > box.left && r.left < box.right && r.bottom > box.top && r.top < box.bottom && (r.width > 0 || r.height > 0);
    const paths = [...document.querySelectorAll('#rec-map path')];
    return { segments: paths.filter((p) => p.classList.contains('fault-segment') && inside(p.getBoundingClientRect()) && (p.getAttribute('d') || '').length > 4).length,
      drawn: paths.filter((p) => inside(p.getBoundingClientRect()) && (p.getAttribute('d') || '').length > 4).length };
  });
  let v = await visible();
  check(v.segments === 2, 'both segments in view after the zoom: ' + JSON.stringify(v));
  await shot(page, 'op-04-zoom-to-fault');
  // Wheel zoom over a segment's middle, far in: the map keeps drawing.
  const mid = await page.evaluate(() => {
    const m = window.geodlqRecMap;
    // The middle of the segment that lies within the map (the shorter).
    const px = (f) => f.mk.coords.map(([x, y]) => m.latLngToContainerPoint([y, x]));
    const len = (f) => { const [a, b] = px(f); return Math.hypot(a.x - b.x, a.y - b.y); };
    const f = m.geodlqFaults.filter((x) => x.mk.kind === 'segment').sort((x, y) => len(x) - len(y))[0];
    const [a, b] = px(f);
    const r = document.getElementById('rec-map').getBoundingClientRect();
    return [r.left + (a.x + b.x) / 2, r.top + (a.y + b.y) / 2];
  });
  await page.mouse.move(mid[0], mid[1]);
  const z0 = await page.evaluate(() => window.geodlqRecMap.getZoom());
  for (let i = 0; i < 40 && await page.evaluate(() => window.geodlqRecMap.getZoom() < window.geodlqRecMap.getMaxZoom()); i++) {
    await page.mouse.wheel(0, -300);
    await page.waitForTimeout(120);
  }
  await page.waitForTimeout(600);
  v = await visible();
  const z = await page.evaluate(() => window.geodlqRecMap.getZoom());
  const zmax = await page.evaluate(() => window.geodlqRecMap.getMaxZoom());
  check(z > z0 && z === zmax, `the wheel zoomed in from ${z0} to ${z}, the deepest (${zmax})`);
  check(v.drawn > 0 && v.segments > 0, `wheel-zoomed to ${z} over a segment, the map still draws it: ${JSON.stringify(v)}`);
  await page.mouse.move(10, 10);
  noErrors();
  log(`Canada's loop went from ${Math.round(loopWhole)} px to ${Math.round(loopZoomed)} px; Sudan's crossing segments ${zoomed.map(Math.round)} px; wheel zoom to ${z} still draws`);

  step = 'repair preview size';
  await page.click('#rec-repairs button >> text="Preview make-valid"');
  await page.waitForSelector('#repair-out[data-state=done]', { timeout: 30000 });
  await page.waitForFunction(() => document.querySelectorAll('#repair-out .mini-map.leaflet-container').length === 2);
  const minis = await page.$$eval('#repair-out .mini-map', (ms) => ms.map((m) => {
    const r = m.getBoundingClientRect();
    return { w: r.width, h: r.height, attribution: !!m.querySelector('.leaflet-control-attribution') };
  }));
  check(minis.length === 2 && minis.every((m) => m.w >= 380 && m.h >= 230 && !m.attribution), 'previews large and unobstructed: ' + JSON.stringify(minis));
  await page.evaluate(() => document.querySelector('#repair-out').scrollIntoView());
  await page.waitForTimeout(300);
  await shot(page, 'op-05-repair-preview');
  log('repair previews ' + minis.map((m) => Math.round(m.w) + '×' + Math.round(m.h)).join(', ') + ' px, no attribution over them');
  await page.click('#rec-close');

  step = 'shapes on the main map';
  await page.evaluate(() => window.geodlqMap.setView([15, 30], 6));
  await page.waitForFunction(() => parseInt(document.getElementById('map').dataset.shapes || '0', 10) > 0, null, { timeout: 20000 });
  const shapes = await page.$$eval('#map path.geodlq-shape', (ps) => ps.length);
  check(shapes > 0, 'failing geometries drawn: ' + shapes);
  await page.waitForTimeout(300);
  await shot(page, 'op-06-shapes-zoomed-in');
  await page.evaluate(() => window.geodlqMap.setView([20, 0], 2));
  await page.waitForFunction(() => document.getElementById('map').dataset.shapes === '0', null, { timeout: 20000 });
  check(await page.$$eval('#map path.geodlq-shape', (ps) => ps.length) === 0, 'zoomed out, markers only');
  noErrors();
  log(`${shapes} failing geometries drawn at zoom 6 over Sudan; none at zoom 2`);

  step = 'stale answers';
  // Every unfiltered answer of the list and the overview is held back
  // 1.5 s while `slow` is set: a Reset's answers arrive after the Apply
  // that followed it.
  let slow = false;
  await page.route(/\/api\/(records|overview)\?/, async (route) => {
    const u = new URL(route.request().url());
    if (slow && !u.searchParams.has('q')) await new Promise((r) => setTimeout(r, 1500));
    try { await route.continue(); } catch { /* aborted by the page: a newer request replaced it */ }
  });
  await page.fill('#f-q', 'evt-eu-2');
  await page.click('#filters button[type=submit]');
  await page.waitForFunction(() => document.querySelectorAll('#rows tr.rec').length === 1);
  slow = true;
  await page.click('#reset-filters'); // slowed
  await page.fill('#f-q', 'evt-eu-3');
  await page.click('#filters button[type=submit]'); // fast
  await page.waitForTimeout(2500); // the Reset's answers have arrived (or were aborted)
  const after = await page.evaluate(() => ({
    q: document.getElementById('f-q').value,
    rows: [...document.querySelectorAll('#rows tr.rec')].map((r) => r.dataset.event),
    open: document.getElementById('ov-total').textContent,
  }));
  check(after.q === 'evt-eu-3' && after.rows.length === 1 && after.rows[0] === 'evt-eu-3' && after.open.startsWith('1 open'),
    'after Reset then Apply, the list and overview show the Apply: ' + JSON.stringify(after));
  // And the other way round: a slow filtered answer, then Reset.
  slow = false;
  await page.unroute(/\/api\/(records|overview)\?/);
  await page.route(/\/api\/(records|overview)\?/, async (route) => {
    const u = new URL(route.request().url());
    if (u.searchParams.has('q')) await new Promise((r) => setTimeout(r, 1500));
    try { await route.continue(); } catch { /* aborted */ }
  });
  await page.fill('#f-q', 'evt-eu-1');
  await page.click('#filters button[type=submit]'); // slowed
  await page.click('#reset-filters'); // fast
  await page.waitForTimeout(2500);
  const after2 = await page.evaluate(() => ({
    q: document.getElementById('f-q').value,
    rows: document.querySelectorAll('#rows tr.rec').length,
    open: document.getElementById('ov-total').textContent,
  }));
  check(after2.q === '' && after2.rows === expectTotal && after2.open.startsWith(expectTotal + ' open'),
    'after Apply then Reset, the list and overview show the Reset: ' + JSON.stringify(after2));
  await page.unroute(/\/api\/(records|overview)\?/);
  check(errors.every((e) => !e.includes('abort')), 'aborted requests are not errors: ' + errors);
  noErrors();
  log('a slowed answer never replaces a newer one (list and overview)');

  step = 'property search';
  // Words only the events' properties hold: the list shows exactly the
  // events whose payload holds them (read by the Go test from the raw
  // payloads), whatever the case; a word no event holds empties the list,
  // which says so.
  const applied = async (q, n) => {
    await page.fill('#f-q', q);
    await page.click('#filters button[type=submit]');
    await page.waitForFunction(({ q, n }) => document.getElementById('f-q').value === q &&
      document.getElementById('list-count').dataset.total === String(n) &&
      document.querySelectorAll('#rows tr.rec').length === n, { q, n }, { timeout: 20000 });
  };
  for (const s of searches) {
    await applied(s.q, s.events.length);
    const got = await page.$$eval('#rows tr.rec', (trs) => trs.map((t) => t.dataset.event).sort());
    check(JSON.stringify(got) === JSON.stringify(s.events), `search ${s.q}: want ${s.events}, the list shows ${got}`);
    check(!(await page.$('#rows tr.empty')), `search ${s.q}: no empty-list text beside rows`);
    if (s.q === searches[0].q) {
      await page.waitForTimeout(300);
      await shot(page, 'op-08-property-search');
    }
    noErrors();
  }
  const nonsense = 'qzxv-no-event-says-this';
  await applied(nonsense, 0);
  const empty = await page.textContent('#rows tr.empty');
  check(empty.includes('No record matches these filters'), 'the empty list says so: ' + empty);
  check((await page.textContent('#list-count')).includes('of 0 matching'), 'the count says 0: ' + await page.textContent('#list-count'));
  await page.click('#reset-filters');
  await page.waitForFunction((n) => document.getElementById('list-count').dataset.total === String(n) &&
    document.querySelectorAll('#rows tr.rec').length === n && !document.querySelector('#rows tr.empty'), expectTotal, { timeout: 20000 });
  noErrors();
  log(searches.map((s) => `${s.q}: ${s.events.length} (${s.events.join(', ')})`).join('; ') + `; ${nonsense}: none, said`);

  step = 'source pointer';
  // This console reads the default source (source_uri), which the
  // countries do not carry.
  const sudanSource = await page.textContent('#rows tr.rec[data-event="evt-sudan"] td:nth-child(9)');
  check(sudanSource === '–', 'without a pointer, Sudan has no source: ' + sudanSource);
  // The second console, started with --source-pointer: every event's
  // value there in the Source column.
  const page2 = await ctx.newPage();
  page2.on('pageerror', (e) => errors.push(step + ': pageerror: ' + e.message));
  page2.on('console', (m) => { if (m.type() === 'error') errors.push(step + ': console: ' + m.text()); });
  page2.on('dialog', (d) => { errors.push(step + ': dialog: ' + d.message()); d.dismiss().catch(() => {}); });
  await page2.goto(pointerURL);
  await page2.waitForSelector('body[data-ready=true]', { timeout: 60000 });
  await page2.waitForFunction((n) => document.getElementById('list-count').dataset.total === String(n) &&
    document.querySelectorAll('#rows tr.rec').length === n, expectTotal, { timeout: 20000 });
  const cells = await page2.$$eval('#rows tr.rec', (trs) => trs.map((t) => ({ event: t.dataset.event, source: t.children[8].textContent })));
  let named = 0, checked = 0;
  for (const c of cells) {
    if (!(c.event in pointerSources)) continue;
    const want = pointerSources[c.event] || '–';
    check(c.source === want, `${c.event}: the Source column says ${c.source}, the event's ${pointer} is ${want}`);
    checked++;
    if (want !== '–') named++;
  }
  check(named >= 3 && checked >= 10, `the Source column checked on ${checked} rows, ${named} with a value`);
  check((await page2.getAttribute('#th-source', 'title')).includes(pointer), 'the Source column names the pointer: ' + await page2.getAttribute('#th-source', 'title'));
  await page2.evaluate(() => document.querySelector('#rows tr.rec[data-event="evt-sudan"]').scrollIntoView({ block: 'center' }));
  await page2.waitForTimeout(300);
  await shot(page2, 'op-09-source-pointer');
  // The source filter reads it too.
  const provider = pointerSources['evt-sudan'];
  const withProvider = Object.entries(pointerSources).filter(([, v]) => v === provider).map(([k]) => k).sort();
  await page2.fill('#f-source', provider.slice(0, provider.indexOf('/', 8)));
  await page2.click('#filters button[type=submit]');
  await page2.waitForFunction((n) => document.getElementById('list-count').dataset.total === String(n) &&
    document.querySelectorAll('#rows tr.rec').length === n, withProvider.length, { timeout: 20000 });
  const filtered = await page2.$$eval('#rows tr.rec', (trs) => trs.map((t) => t.dataset.event).sort());
  check(JSON.stringify(filtered) === JSON.stringify(withProvider), `source prefix: want ${withProvider}, the list shows ${filtered}`);
  // The detail panel names the source as configured.
  await page2.click('#rows tr.rec[data-event="evt-sudan"]');
  await page2.waitForFunction(() => document.getElementById('record').dataset.loaded === 'true' &&
    document.getElementById('rec-title').textContent.startsWith('evt-sudan'), null, { timeout: 20000 });
  const fieldRows = await page2.$$eval('#rec-fields tr', (trs) => trs.map((t) => [t.children[0].textContent, t.children[1].textContent]));
  check(fieldRows.some(([k, v]) => k === 'source ' + pointer && v === provider), 'the panel says the source at the pointer: ' + JSON.stringify(fieldRows));
  check(!fieldRows.some(([k]) => /source URI/i.test(k)), 'no "source URI" label: ' + JSON.stringify(fieldRows));
  const all2 = await page2.textContent('#record');
  check(!BROKEN.test(all2), 'the panel shows an error: ' + all2);
  await page2.evaluate((p) => [...document.querySelectorAll('#rec-fields tr')].find((t) => t.children[0].textContent === 'source ' + p)
    .scrollIntoView({ block: 'center' }), pointer);
  await page2.waitForTimeout(300);
  await shot(page2, 'op-10-source-pointer-detail');
  await page2.close();
  noErrors();
  log(`with ${pointer}: ${named} of ${checked} rows checked show their provider; the source prefix selects ${withProvider.length}; the panel says "source ${pointer}"`);

  step = 'bulk replay with would_fail rows';
  await page.click('#f-class input[value=crs_mismatch]');
  await page.click('#filters button[type=submit]');
  await page.waitForFunction(() => [...document.querySelectorAll('#rows tr.rec')].every((r) => r.children[3].textContent === 'crs_mismatch'));
  const matching = await page.evaluate(() => document.querySelectorAll('#rows tr.rec').length);
  await page.click('#replay-sel');
  await page.waitForSelector('#job-dialog[open]');
  const scope = await page.textContent('#job-options .job-scope');
  check(scope.includes('class: crs_mismatch') && scope.includes('(' + matching + ' now)'), 'the dialog restates the filter: ' + scope);
  await page.check('#repair-reproject');
  await page.click('#job-dry');
  await page.waitForSelector('#job-status[data-state=done][data-dry=true]', { timeout: 60000 });
  const items = await page.$$eval('#job-items tr[data-outcome]', (trs) => trs.map((t) => ({ outcome: t.dataset.outcome, why: t.children[3].textContent })));
  const attention = (o) => /fail|skipped|left|unavailable/.test(o);
  check(items.some((i) => i.outcome === 'would_fail'), 'a would_fail row: ' + JSON.stringify(items));
  check(items.some((i) => !attention(i.outcome)), 'a row that would be replayed: ' + JSON.stringify(items));
  const firstCalm = items.findIndex((i) => !attention(i.outcome));
  check(items.slice(firstCalm).every((i) => !attention(i.outcome)), 'would_fail rows first: ' + items.map((i) => i.outcome));
  check(items.filter((i) => attention(i.outcome)).every((i) => i.why.trim() !== '' && !BROKEN.test(i.why)), 'each would_fail row says why: ' + JSON.stringify(items));
  await shot(page, 'op-07-bulk-dry-run');
  const wouldFail = items.filter((i) => i.outcome === 'would_fail').length;
  await page.click('#job-confirm');
  await page.waitForSelector('#job-status[data-state=done][data-dry=false]', { timeout: 60000 });
  const counts = await page.textContent('#job-counts');
  check(/repaired \d+/.test(counts), 'the replay repaired records: ' + counts);
  await page.click('#job-close');
  noErrors();
  log(`${matching} crs_mismatch records: ${wouldFail} would fail (listed first, each with why); replayed: ${counts.trim()}`);

  console.log(JSON.stringify({ step: 'done', ok: 'all steps passed' }));
  await ctx.close();
  rmSync(profile, { recursive: true, force: true });
} catch (err) {
  console.log(JSON.stringify({ step, error: err.message, pageErrors: errors }));
  await ctx.close().catch(() => {});
  rmSync(profile, { recursive: true, force: true });
  process.exit(1);
}
