// The geodlq console page. Every string that comes from a record
// (event ids, reasons, properties, payloads: attacker-controlled) reaches
// the DOM as text (textContent, text nodes, attribute values), never as
// HTML; the server's Content-Security-Policy forbids inline code anyway.
import L from 'leaflet';

const $ = (id) => document.getElementById(id);

// el builds an element; string children become text nodes.
function el(tag, props, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'on') for (const [ev, fn] of Object.entries(v)) e.addEventListener(ev, fn);
    else if (k === 'data') for (const [dk, dv] of Object.entries(v)) e.dataset[dk] = String(dv);
    else e.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
}

const CLASS_COLORS = {
  invalid_geometry: '#d6336c',
  crs_mismatch: '#1c7ed6',
  schema_violation: '#7048e8',
  resource_exhausted: '#e67700',
  transient: '#2b8a3e',
  unknown: '#495057',
  '': '#868e96',
};
const colorOf = (c) => CLASS_COLORS[c] || '#868e96';

// ---- state ---------------------------------------------------------------

const state = {
  config: null,
  token: sessionStorage.getItem('geodlq-token') || '',
  filters: {},
  bbox: null, // [minx, miny, maxx, maxy]
  cursors: [''], // cursor of each page shown, for First
  cursor: '',
  next: '',
  rows: [],
  selected: new Map(), // "dest\u0000id" -> {destination, id}
  open: null, // {destination, id}
};

// A token passed in the URL's fragment (#token=…) is taken and removed
// from the address bar: fragments are never sent to the server.
(function takeToken() {
  const m = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (m) {
    state.token = decodeURIComponent(m[1]);
    sessionStorage.setItem('geodlq-token', state.token);
    history.replaceState(null, '', location.pathname + location.search);
  }
})();

// ---- API -----------------------------------------------------------------

class APIError extends Error {
  constructor(status, problem) {
    super((problem && (problem.detail || problem.title)) || 'HTTP ' + status);
    this.status = status;
    this.problem = problem;
  }
}

// latest keeps one request of each kind (list, overview, map, shapes)
// current: starting one aborts the previous, and an answer that arrives
// after a newer request started is dropped (fresh() is false), so that a
// slow answer to old filters never replaces the new one's.
const inflight = {};
function latest(kind) {
  const prev = inflight[kind];
  if (prev) prev.ctl.abort();
  const cur = { ctl: new AbortController(), seq: (prev ? prev.seq : 0) + 1 };
  inflight[kind] = cur;
  return { signal: cur.ctl.signal, fresh: () => inflight[kind] === cur };
}
const aborted = (err) => err && err.name === 'AbortError';

async function api(path, opts = {}) {
  const headers = { Accept: 'application/json' };
  if (opts.body !== undefined) headers['Content-Type'] = 'application/json';
  if (opts.method && opts.method !== 'GET' && state.token) headers.Authorization = 'Bearer ' + state.token;
  const res = await fetch(path, {
    method: opts.method || 'GET',
    headers,
    body: opts.body !== undefined ? JSON.stringify(opts.body) : undefined,
    credentials: 'same-origin',
    cache: 'no-store',
    signal: opts.signal,
  });
  let data = null;
  try { data = await res.json(); } catch { data = null; }
  if (!res.ok) throw new APIError(res.status, data);
  return data;
}

function query(extra = {}) {
  const p = new URLSearchParams();
  const f = { ...state.filters, ...extra };
  for (const [k, v] of Object.entries(f)) {
    if (v === undefined || v === null || v === '' || (Array.isArray(v) && v.length === 0)) continue;
    p.set(k, Array.isArray(v) ? v.join(',') : String(v));
  }
  if (state.bbox) p.set('bbox', state.bbox.map((n) => n.toFixed(6)).join(','));
  return p;
}

function filterObject() {
  const q = {};
  const f = state.filters;
  if (f.destination) q.destination = f.destination;
  if (f.class && f.class.length) q.class = f.class;
  if (f.stage) q.stage = [f.stage];
  if (f.reason) q.reason = [f.reason];
  if (f.epsg) q.epsg = String(f.epsg).split(',').map((s) => parseInt(s.trim(), 10)).filter((n) => !Number.isNaN(n));
  if (f.since) q.since = f.since;
  if (f.until) q.until = f.until;
  if (f.source_prefix) q.source_prefix = f.source_prefix;
  if (f.q) q.q = f.q;
  if (f.replayed) q.replayed = true;
  if (state.bbox) q.bbox = state.bbox.map((n) => n.toFixed(6)).join(',');
  return q;
}

function toast(text) {
  const t = el('div', { class: 'toast' }, text);
  $('toasts').append(t);
  setTimeout(() => t.remove(), 6000);
}

const fmtTime = (s) => (s ? new Date(s).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z') : '–');

// ---- config and header ------------------------------------------------------

async function loadConfig() {
  const c = await api('/api/config');
  state.config = c;
  $('store').textContent = c.store + ' (' + c.adapter + ')';
  $('store').title = c.store;
  const mode = $('mode');
  if (c.read_only) {
    mode.textContent = 'read-only';
    mode.title = 'started without a token: replay and discard are off';
  } else {
    mode.textContent = state.token ? 'actions on' : 'actions need the token';
    mode.className = 'badge' + (state.token ? ' rw' : '');
    $('unlock').hidden = !!state.token;
  }
  for (const b of document.querySelectorAll('button.act')) b.disabled = c.read_only;
  fillSelect($('f-destination'), c.destinations, 'all');
  fillSelect($('f-stage'), c.stages, 'any');
  fillSelect($('f-reason'), c.reason_kinds, 'any');
  const cls = $('f-class');
  clear(cls);
  for (const name of c.classes) {
    cls.append(el('label', {}, el('input', { type: 'checkbox', name: 'class', value: name }),
      el('span', { class: 'cls', 'data-class': name }, name)));
  }
  for (const s of cls.querySelectorAll('span.cls')) s.style.background = colorOf(s.dataset.class);
  // The event's source is the member --source-pointer names: the list's
  // Source column, the source filter and the detail panel say which.
  const src = 'the event\'s ' + sourceLabel() + ' (geodlq serve --source-pointer)';
  $('th-source').title = src;
  $('f-source').title = 'records whose source (' + c.source_pointer + ') starts with this';
  indexStatus(c.index);
  legend();
}

// sourceLabel names the event's source as the console reads it: the
// member at the configured JSON pointer, as the CLI's --source-pointer.
function sourceLabel() {
  const p = (state.config && state.config.source_pointer) || '/source_uri';
  return 'source ' + p;
}

function fillSelect(sel, values, anyLabel) {
  const cur = sel.value;
  clear(sel);
  sel.append(el('option', { value: '' }, anyLabel));
  for (const v of values) sel.append(el('option', { value: v }, v));
  sel.value = cur;
}

function indexStatus(ix) {
  const s = $('index-status');
  if (!ix) return;
  if (ix.error) s.textContent = 'map index: ' + ix.error;
  else if (!ix.ready) s.textContent = 'counting the store…';
  else s.textContent = ix.records + ' open records';
}

function legend() {
  const lg = $('legend-classes');
  clear(lg);
  lg.append('Class:');
  for (const name of state.config.classes) {
    const sw = el('span', { class: 'sw' });
    sw.style.background = colorOf(name);
    lg.append(sw, name.replace('_', ' '));
  }
}

// ---- filters ----------------------------------------------------------------

function readFilters() {
  const f = {};
  f.destination = $('f-destination').value;
  f.class = [...document.querySelectorAll('#f-class input:checked')].map((i) => i.value);
  f.stage = $('f-stage').value;
  f.reason = $('f-reason').value;
  f.epsg = $('f-epsg').value.trim();
  f.since = $('f-since').value.trim();
  f.until = $('f-until').value.trim();
  f.source_prefix = $('f-source').value.trim();
  f.q = $('f-q').value.trim();
  f.replayed = $('f-replayed').checked ? 'true' : '';
  state.filters = f;
}

function setFilter(name, value) {
  if (name === 'class') {
    for (const i of document.querySelectorAll('#f-class input')) i.checked = i.value === value;
  } else if (name === 'destination') $('f-destination').value = value;
  else if (name === 'stage') $('f-stage').value = value;
  else if (name === 'reason') $('f-reason').value = value;
  else if (name === 'epsg') $('f-epsg').value = value;
  else if (name === 'source_prefix') $('f-source').value = value;
  applyFilters();
}

function applyFilters() {
  readFilters();
  state.cursors = [''];
  state.cursor = '';
  state.selected.clear();
  refreshAll();
}

const listError = (err) => { if (!aborted(err)) showFilterError(err); };

function showFilterError(err) {
  $('filter-error').textContent = err ? err.message : '';
}

async function refreshAll() {
  showFilterError(null);
  try {
    await Promise.all([loadList(), loadOverview(), loadMap()]);
  } catch (err) {
    if (!aborted(err)) showFilterError(err);
  }
}

// ---- overview ---------------------------------------------------------------

async function loadOverview() {
  const req = latest('overview');
  const ov = await api('/api/overview?' + query(), { signal: req.signal });
  if (!req.fresh()) return;
  $('ov-total').textContent = ov.open + ' open' + (ov.replayed ? ', ' + ov.replayed + ' replayed' : '');
  drawTimeline(ov);
  const box = $('ov-tables');
  clear(box);
  const tbl = (title, rows, filterName) => {
    if (!rows || rows.length === 0) return;
    const t = el('table', {}, el('caption', {}, title));
    for (const r of rows.slice(0, 12)) {
      const tr = el('tr', { class: filterName ? 'click' : '' }, el('td', {}, r.key), el('td', { class: 'n' }, r.count));
      if (filterName && r.key !== '(none)') tr.addEventListener('click', () => setFilter(filterName, r.key));
      if (filterName === 'class') {
        const sw = el('span', { class: 'cls' }, r.key);
        sw.style.background = colorOf(r.key);
        tr.firstChild.replaceChildren(sw);
      }
      t.append(tr);
    }
    box.append(t);
  };
  tbl('By class', ov.by_class, 'class');
  tbl('By reason kind', ov.by_reason_kind, 'reason');
  tbl('By destination', ov.by_destination, 'destination');
  tbl('By stage', ov.by_stage, 'stage');
  tbl('By EPSG', ov.by_epsg, 'epsg');
  tbl('Top source prefixes', ov.top_source_prefixes, 'source_prefix');
}

const SVG = 'http://www.w3.org/2000/svg';
function svg(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  return e;
}

function drawTimeline(ov) {
  const box = $('timeline');
  clear(box);
  const tl = ov.timeline || [];
  box.append(el('div', { class: 'muted' }, 'Failures over time, by class (' + ov.bucket + ' bars)'));
  if (tl.length === 0) return;
  const W = 270, H = 90;
  const s = svg('svg', { viewBox: `0 0 ${W} ${H + 14}`, role: 'img', 'aria-label': 'failures over time by class' });
  const t0 = Date.parse(tl[0].start), t1 = Date.parse(tl[tl.length - 1].start);
  const n = Math.max(1, Math.round((t1 - t0) / durMs(ov.bucket)) + 1);
  const bw = W / n;
  let maxTotal = 1;
  for (const b of tl) maxTotal = Math.max(maxTotal, Object.values(b.by_class).reduce((a, c) => a + c, 0));
  for (const b of tl) {
    const i = Math.round((Date.parse(b.start) - t0) / durMs(ov.bucket));
    let y = H;
    for (const [cls, c] of Object.entries(b.by_class).sort()) {
      const h = (c / maxTotal) * (H - 4);
      const r = svg('rect', { x: i * bw + 0.5, y: y - h, width: Math.max(1, bw - 1), height: h, fill: colorOf(cls) });
      const title = svg('title');
      title.textContent = fmtTime(b.start) + ' ' + cls + ': ' + c;
      r.append(title);
      s.append(r);
      y -= h;
    }
  }
  const lab = (x, anchor, text) => {
    const t = svg('text', { x, y: H + 12, 'font-size': 9, 'text-anchor': anchor, fill: '#667085' });
    t.textContent = text;
    s.append(t);
  };
  lab(0, 'start', fmtTime(tl[0].start).slice(5, 16));
  lab(W, 'end', fmtTime(tl[tl.length - 1].start).slice(5, 16));
  box.append(s);
}

function durMs(go) {
  let ms = 0;
  for (const [, n, u] of go.matchAll(/([\d.]+)(h|m|s)/g)) ms += parseFloat(n) * { h: 3600e3, m: 60e3, s: 1e3 }[u];
  return ms || 60e3;
}

// ---- list -------------------------------------------------------------------

async function loadList() {
  const req = latest('list');
  const p = query({ sort: $('sort').value, limit: 100 });
  if (state.cursor) p.set('cursor', state.cursor);
  const ans = await api('/api/records?' + p, { signal: req.signal });
  if (!req.fresh()) return;
  if (!state.cursor) { state.total = ans.total; state.totalAtLeast = !!ans.total_is_lower_bound; }
  $('rows').dataset.sort = p.get('sort');
  state.rows = ans.records;
  state.next = ans.next || '';
  const body = $('rows');
  clear(body);
  for (const r of ans.records) {
    const key = r.destination + '\u0000' + r.id;
    const cb = el('input', { type: 'checkbox', title: 'select' });
    cb.checked = state.selected.has(key);
    cb.addEventListener('click', (e) => {
      e.stopPropagation();
      if (cb.checked) state.selected.set(key, { destination: r.destination, id: r.id });
      else state.selected.delete(key);
      selectionButtons();
    });
    const cls = el('span', { class: 'cls' }, r.class || 'not an envelope');
    cls.style.background = colorOf(r.class || '');
    const tr = el('tr', { class: 'rec', data: { destination: r.destination, id: r.id, event: r.event_id || '', kind: r.reason_kind || '' } },
      el('td', {}, cb),
      el('td', {}, fmtTime(r.dead_lettered_at || r.published_at)),
      el('td', { title: r.event_id || '' }, r.event_id || '–'),
      el('td', {}, cls),
      el('td', {}, r.stage || '–'),
      el('td', { title: r.reason || '' }, r.reason || '–'),
      el('td', { class: 'n' }, r.vertex_count ? String(r.vertex_count) : '–'),
      el('td', {}, r.epsg ? String(r.epsg) : '–'),
      el('td', { title: r.source_uri || '' }, r.source_uri || '–'),
      el('td', { title: r.destination + '/' + r.id }, r.destination + '/' + r.id),
    );
    if (state.open && state.open.destination === r.destination && state.open.id === r.id) tr.classList.add('open');
    tr.addEventListener('click', () => openRecord(r.destination, r.id));
    body.append(tr);
  }
  if (!ans.records.length) {
    body.append(el('tr', { class: 'empty' }, el('td', { colspan: 10, class: 'muted' },
      state.cursors.length > 1 ? 'No more records on this page.' : 'No record matches these filters.')));
  }
  const first = (state.cursors.length - 1) * 100;
  const range = ans.records.length ? (first + 1) + '–' + (first + ans.records.length) : 'none';
  $('list-count').textContent = '(' + (state.total !== undefined && state.total !== null
    ? range + ' of ' + (state.totalAtLeast ? '≥ ' : '') + state.total + ' matching'
    : range + (ans.partial ? ', scan budget reached: more may follow' : state.next ? ', more follow' : '')) + ')';
  $('list-count').dataset.total = state.total === undefined || state.total === null ? '' : String(state.total);
  $('next').disabled = !state.next;
  $('first').disabled = state.cursors.length <= 1;
  $('prev').disabled = state.cursors.length <= 1;
  $('page-info').textContent = 'page ' + state.cursors.length;
  $('check-all').checked = false;
  selectionButtons();
}

function selectionButtons() {
  const n = state.selected.size;
  const ro = !state.config || state.config.read_only;
  $('replay-sel').textContent = n ? `Replay ${n} selected…` : 'Replay all matching…';
  $('discard-sel').textContent = n ? `Discard ${n} selected…` : 'Discard all matching…';
  $('replay-sel').disabled = ro;
  $('discard-sel').disabled = ro;
}

// ---- map --------------------------------------------------------------------

let map, markerLayer, shapeLayer, boxLayer, basemapData;

async function basemap() {
  if (!basemapData) basemapData = await (await fetch('/assets/basemap.json')).json();
  return basemapData;
}

function addBasemap(m) {
  m.createPane('basemap');
  m.getPane('basemap').style.zIndex = 250;
  if (state.config.tile_url) {
    L.tileLayer(state.config.tile_url, { attribution: state.config.tile_attribution || '', maxZoom: 19 }).addTo(m);
  }
  basemap().then((gj) => {
    L.geoJSON(gj, {
      pane: 'basemap',
      interactive: false,
      style: { color: '#94a3b8', weight: 0.7, fillColor: '#f1f5f9', fillOpacity: state.config.tile_url ? 0 : 1 },
    }).addTo(m);
  });
  if (m.attributionControl) { // the repair previews name it under the maps
    m.attributionControl.setPrefix(false);
    m.attributionControl.addAttribution('Basemap: Natural Earth (public domain)');
  }
}

function initMap() {
  map = L.map('map', { worldCopyJump: true, minZoom: 1, maxZoom: 19, zoomSnap: 1 }).setView([20, 0], 2);
  addBasemap(map);
  map.createPane('shapes');
  map.getPane('shapes').style.zIndex = 390; // over the basemap, under the markers
  shapeLayer = L.layerGroup().addTo(map);
  markerLayer = L.layerGroup().addTo(map);
  window.geodlqMap = map; // for the browser tests and the curious
  map.on('moveend', () => loadMap().catch(() => {}));
  setupBoxDrawing();
}

async function loadMap() {
  if (!map) return;
  const req = latest('map');
  const b = map.getBounds();
  const west = Math.max(-180, b.getWest()), east = Math.min(180, b.getEast());
  const south = Math.max(-90, b.getSouth()), north = Math.min(90, b.getNorth());
  const p = query({ zoom: map.getZoom(), view: [west, south, east, north].map((n) => n.toFixed(6)).join(',') });
  loadShapes(p).catch(() => {});
  const ans = await api('/api/map?' + p, { signal: req.signal });
  if (!req.fresh()) return;
  markerLayer.clearLayers();
  let drawn = 0;
  for (const m of ans.markers) {
    drawn += m.count;
    if (m.record) {
      const r = m.record;
      const cm = L.circleMarker([m.lat, m.lon], {
        radius: 7, color: '#fff', weight: 1.5, fillColor: colorOf(r.class), fillOpacity: 0.95,
        className: 'geodlq-marker',
      });
      cm.bindTooltip(() => el('span', {}, (r.event_id || r.id) + ' — ' + r.class + (r.reason_kind ? ' / ' + r.reason_kind : '') +
        (r.located === 'centroid' ? ' (centroid)' : ' (fault)') + (r.reprojected_from ? ', reprojected from EPSG:' + r.reprojected_from : '')));
      cm.on('click', () => openRecord(r.destination, r.id));
      cm.on('add', () => {
        const e = cm.getElement();
        if (e) { e.dataset.id = r.id; e.dataset.destination = r.destination; e.dataset.event = r.event_id || ''; }
      });
      markerLayer.addLayer(cm);
    } else {
      const size = Math.round(Math.min(54, 24 + Math.log2(m.count) * 5));
      const div = el('div', { class: 'geodlq-cluster', data: { count: m.count }, title: clusterTitle(m) }, String(m.count));
      div.style.background = colorOf(m.class);
      div.style.width = div.style.height = size + 'px';
      const mk = L.marker([m.lat, m.lon], {
        icon: L.divIcon({ html: div, className: 'geodlq-cluster-icon', iconSize: [size, size] }),
        keyboard: true,
      });
      mk.on('click', () => {
        const [a, bb, c, d] = m.bounds;
        if (a === c && bb === d) map.setView([m.lat, m.lon], Math.min(map.getZoom() + 3, 19));
        else map.fitBounds([[bb, a], [d, c]], { padding: [30, 30], maxZoom: 19 });
      });
      markerLayer.addLayer(mk);
    }
  }
  const info = $('map-info');
  info.dataset.drawn = String(drawn);
  info.dataset.located = String(ans.located);
  let text = ans.in_view + ' in view · ' + ans.located + ' on the map';
  if (ans.reprojected) text += ' · ' + ans.reprojected + ' reprojected with PROJ';
  if (ans.unlocated) text += ' · ' + ans.unlocated + ' without a place (hover)';
  if (ans.capped) text += ' · the newest ' + ans.limit + ' matching records (narrow the filters for the rest)';
  info.textContent = text;
  const why = Object.entries(ans.why_not_on_map || {}).map(([k, v]) => v + ': ' + k).join('\n');
  info.title = (ans.reprojected ? ans.reprojected + ' records are in another CRS: their points were reprojected to EPSG:4326 with PROJ for display.\n' : '') +
    (why ? 'Not on the map:\n' + why : '');
  indexStatus(ans.index);
}

// loadShapes draws the failing geometries themselves (simplified by the
// server to about a pixel) once the map is zoomed in far enough; their
// markers stay on top.
async function loadShapes(p) {
  const req = latest('shapes');
  const minZoom = (state.shapesMinZoom || 5);
  if (map.getZoom() < minZoom) {
    shapeLayer.clearLayers();
    $('map').dataset.shapes = '0';
    return;
  }
  const ans = await api('/api/shapes?' + p, { signal: req.signal });
  if (!req.fresh()) return;
  state.shapesMinZoom = ans.min_zoom;
  shapeLayer.clearLayers();
  for (const sh of ans.shapes) {
    const c = colorOf(sh.class);
    const lyr = L.geoJSON(sh.geometry, {
      pane: 'shapes', className: 'geodlq-shape',
      style: { color: c, weight: 1.5, fillColor: c, fillOpacity: 0.18, className: 'geodlq-shape' },
      pointToLayer: (_, ll) => L.circleMarker(ll, { pane: 'shapes', radius: 3, color: c, className: 'geodlq-shape' }),
    });
    lyr.bindTooltip(() => el('span', {}, (sh.event_id || sh.id) + ' — ' + sh.class + (sh.vertices < sh.of ? ' (' + sh.vertices + ' of ' + sh.of + ' vertices drawn)' : '')));
    lyr.on('click', () => openRecord(sh.destination, sh.id));
    shapeLayer.addLayer(lyr);
  }
  $('map').dataset.shapes = String(ans.shapes.length);
}

function clusterTitle(m) {
  return m.count + ' records: ' + Object.entries(m.by_class || {}).map(([k, v]) => k + ' ' + v).join(', ');
}

function setupBoxDrawing() {
  let drawing = false, start = null;
  $('draw-box').addEventListener('click', () => {
    drawing = true;
    map.dragging.disable();
    $('map').classList.add('drawing');
    $('draw-box').textContent = 'Drag on the map…';
  });
  map.on('mousedown', (e) => {
    if (!drawing) return;
    start = e.latlng;
    if (boxLayer) boxLayer.remove();
    boxLayer = L.rectangle([start, start], { color: '#1f6feb', weight: 2, fillOpacity: 0.08, interactive: false }).addTo(map);
  });
  map.on('mousemove', (e) => {
    if (drawing && start) boxLayer.setBounds([start, e.latlng]);
  });
  map.on('mouseup', (e) => {
    if (!drawing || !start) return;
    const b = L.latLngBounds(start, e.latlng);
    drawing = false;
    start = null;
    map.dragging.enable();
    $('map').classList.remove('drawing');
    $('draw-box').textContent = 'Draw box';
    state.bbox = [b.getWest(), b.getSouth(), b.getEast(), b.getNorth()];
    showBox();
    applyFilters();
  });
  $('clear-box').addEventListener('click', () => {
    state.bbox = null;
    if (boxLayer) boxLayer.remove();
    boxLayer = null;
    showBox();
    applyFilters();
  });
}

function showBox() {
  const b = state.bbox;
  $('clear-box').hidden = !b;
  $('f-bbox').textContent = b
    ? 'Box: ' + b.map((n) => n.toFixed(3)).join(', ') + ' — the store\'s box query: fault locations inside it, in the payload\'s coordinates (lon/lat for EPSG:4326).'
    : 'No box: draw one on the map.';
}

// ---- record -----------------------------------------------------------------

let recMap;

// makeDetailMap draws a record's geometry and its fault marks; small
// (the repair previews) leaves the attribution to the text under them.
// The map's faults (m.geodlqFaults) are what zoomToFault centres on.
function makeDetailMap(container, g, small) {
  const planar = g.display === 'planar';
  container.classList.toggle('planar', planar);
  delete container.dataset.zoomedTo;
  // Whole zoom levels and a bounded depth: fractional wheel zoom past
  // what the geometry's precision holds left the map blank.
  const opts = { zoomSnap: 0.5, wheelPxPerZoomLevel: 120, attributionControl: !small };
  const m = L.map(container, planar ? { ...opts, crs: L.CRS.Simple, minZoom: -30, maxZoom: 24 } : { ...opts, minZoom: 0, maxZoom: 20, worldCopyJump: false });
  m.setView([0, 0], planar ? 0 : 1); // vector layers need a view before they are added
  if (!planar) addBasemap(m);
  const layer = L.geoJSON(g.geometry, {
    style: { color: '#1d4ed8', weight: 2, fillColor: '#60a5fa', fillOpacity: 0.25 },
    pointToLayer: (_, ll) => L.circleMarker(ll, { radius: 5, color: '#1d4ed8' }),
  }).addTo(m);
  const group = L.featureGroup([layer]);
  m.geodlqFaults = [];
  m.geodlqPlanar = planar;
  m.geodlqGeometry = g.geometry;
  for (const mk of g.markers || []) {
    const ll = mk.coords.map(([x, y]) => [y, x]);
    let lyr;
    if (mk.kind === 'segment' || mk.kind === 'closing_segment') {
      lyr = L.polyline(ll, {
        color: mk.kind === 'segment' ? '#d6336c' : '#e67700', weight: 5, opacity: 0.85,
        dashArray: mk.kind === 'closing_segment' ? '6 6' : null,
        className: mk.kind === 'segment' ? 'fault-segment' : 'fault-closing',
      });
    } else {
      lyr = L.circleMarker(ll[0], {
        radius: mk.kind === 'point' ? 4 : 7, color: mk.kind === 'point' ? '#111827' : '#7048e8', weight: 2,
        fillOpacity: mk.kind === 'point' ? 1 : 0.2, className: 'fault-' + mk.kind,
      });
    }
    lyr.bindTooltip(() => el('span', {}, mk.label));
    lyr.addTo(m);
    group.addLayer(lyr);
    m.geodlqFaults.push({ mk, lyr });
  }
  const b = group.getBounds();
  m.geodlqWhole = b.isValid() ? b : null;
  // Not animated: a zoom to a fault clicked while the first fit was
  // still animating was undone when that animation ended.
  if (b.isValid()) m.fitBounds(b, { padding: [20, 20], maxZoom: planar ? 24 : 18, animate: false });
  else m.setView([0, 0], 1);
  // Zooming far past the closest look at a fault only loses it: a pixel
  // off at that zoom is a screen off ten levels further ("the map went
  // blank"). The deepest zoom is two levels past it.
  let deepest = m.getZoom();
  for (let i = 0; i < m.geodlqFaults.length; i++) deepest = Math.max(deepest, m.getBoundsZoom(faultBounds(m, i), false, faultPadding(m)));
  m.setMaxZoom(Math.min(planar ? 24 : 20, Math.ceil(deepest) + 2));
  return m;
}

// nearestVertex returns the distance from (x, y) to the geometry's
// nearest other vertex (Infinity when there is none).
function nearestVertex(geom, x, y) {
  let best = Infinity;
  const walk = (c) => {
    if (!Array.isArray(c)) return;
    if (typeof c[0] === 'number') {
      const d = Math.hypot(c[0] - x, c[1] - y);
      if (d > 0 && d < best) best = d;
      return;
    }
    for (const cc of c) walk(cc);
  };
  const g = (geom && geom.type === 'GeometryCollection') ? geom.geometries : [geom];
  for (const gg of g) if (gg) walk(gg.coordinates);
  return best;
}

// zoomToFault centres a detail map on its i-th fault, at a zoom where a
// segment (or the shorter one crossing it) fills most of the map
// or a point's nearest neighbouring vertex is a third of the map away
// (a loop a few kilometres across in a country is then plain).
function zoomToFault(m, i) {
  if (!m || !m.geodlqFaults[i]) return;
  m.fitBounds(faultBounds(m, i), { padding: faultPadding(m), maxZoom: m.getMaxZoom(), animate: false });
  const f = m.geodlqFaults[i];
  if (f.lyr.openTooltip) f.lyr.openTooltip();
  m.getContainer().dataset.zoomedTo = String(i);
}

function faultPadding(m) {
  const size = m.getSize();
  return L.point(Math.round(size.x / 6), Math.round(size.y / 6));
}

// faultBounds is the box zoomToFault fits for the i-th fault.
function faultBounds(m, i) {
  const f = m.geodlqFaults[i];
  let b;
  if (f.lyr.getBounds) {
    // A segment: the shortest of it and the segments crossing it fills
    // the map, so that the crossing shows whichever is long.
    b = f.lyr.getBounds();
    const span = (x) => Math.hypot(x.getEast() - x.getWest(), x.getNorth() - x.getSouth());
    for (const o of m.geodlqFaults) {
      if (o === f || !o.lyr.getBounds || o.mk.kind !== f.mk.kind) continue;
      const ob = o.lyr.getBounds();
      if (ob.intersects(f.lyr.getBounds()) && span(ob) < span(b)) b = ob;
    }
  } else {
    const ll = f.lyr.getLatLng();
    let r = 1.5 * nearestVertex(m.geodlqGeometry, ll.lng, ll.lat);
    if (!Number.isFinite(r) && m.geodlqWhole) {
      const w = m.geodlqWhole;
      r = Math.max(Math.abs(w.getNorth() - w.getSouth()), Math.abs(w.getEast() - w.getWest())) / 50;
    }
    if (!Number.isFinite(r) || r <= 0) r = 0.001;
    b = L.latLngBounds([ll.lat - r, ll.lng - r], [ll.lat + r, ll.lng + r]);
  }
  return b;
}

// openRecord shows a record in the panel; the panel's data-loaded is
// "true" once it is drawn. Opening another record meanwhile drops what
// arrives for the first.
let openSeq = 0;
async function openRecord(dest, id) {
  const panel = $('record');
  panel.dataset.loaded = 'false';
  const seq = ++openSeq;
  try {
    await showRecord(dest, id, () => seq === openSeq);
  } finally {
    if (seq === openSeq) panel.dataset.loaded = 'true';
  }
}

async function showRecord(dest, id, fresh) {
  state.open = { destination: dest, id };
  for (const tr of document.querySelectorAll('#rows tr')) {
    tr.classList.toggle('open', tr.dataset.destination === dest && tr.dataset.id === id);
  }
  const panel = $('record');
  if (panel.hidden) {
    panel.hidden = false;
    map.invalidateSize(); // the map just got narrower
  }
  panel.dataset.destination = dest;
  panel.dataset.id = id;
  $('rec-title').textContent = dest + '/' + id;
  for (const n of ['rec-reason', 'rec-note', 'payload-verified', 'payload-text']) $(n).textContent = '';
  for (const n of ['rec-markers', 'rec-fields', 'payload-props', 'repair-out', 'rec-repairs']) clear($(n));
  if (recMap) { recMap.remove(); recMap = null; }
  const base = '/api/records/' + encodeURIComponent(dest) + '/' + encodeURIComponent(id);
  $('payload-download').href = base + '/payload?download=1';
  let rec;
  try {
    rec = await api(base);
  } catch (err) {
    if (fresh()) $('rec-reason').textContent = err.message;
    return;
  }
  if (!fresh()) return;
  $('rec-title').textContent = (rec.event_id || 'record') + ' — ' + dest + '/' + id;
  $('rec-reason').textContent = rec.reason || rec.error_message || rec.not_envelope || '';
  const fields = [
    ['event id', rec.event_id], ['class', rec.class], ['stage', rec.stage], ['reason kind', rec.reason_kind],
    [rec.stage === 'topology_validation' ? 'GEOS reason' : 'reason', rec.geometry_error && rec.geometry_error.reason], ['error', rec.error_message],
    // Where the fault is, in the CLI's words: "(0.5 0.5) ring 0 segment 0-1".
    ['at', rec.where],
    ['geometry', (rec.geometry_type || '') + (rec.vertex_count ? ', ' + rec.vertex_count + ' vertices' : '') +
      (rec.geometry && rec.geometry.offload_uri ? ', offloaded to ' + rec.geometry.offload_uri : '')],
    ['source CRS', rec.source_crs], ['EPSG', rec.epsg ? String(rec.epsg) : ''], [sourceLabel(), rec.source_uri],
    ['idempotency key', rec.idempotency_key + (rec.idempotency_key_derived ? ' (derived from the payload)' : '')],
    ['attempts', rec.attempts], ['first seen', fmtTime(rec.first_seen_at)], ['dead-lettered', fmtTime(rec.dead_lettered_at)],
    ['route', rec.route], ['status', rec.status], ['trace id', rec.trace_id],
    ['broker', rec.source ? [rec.source.system, rec.source.topic, rec.source.partition !== undefined ? 'partition ' + rec.source.partition : '',
      rec.source.offset !== undefined ? 'offset ' + rec.source.offset : '', rec.source.message_id].filter(Boolean).join(' · ') : ''],
    ['payload', rec.payload_size + ' bytes, sha256 ' + (rec.payload_sha256 || '–')],
    ['not an envelope', rec.not_envelope],
  ];
  for (const [k, v] of fields) {
    if (v === undefined || v === null || v === '' || v === 0) continue;
    $('rec-fields').append(el('tr', {}, el('td', {}, k), el('td', {}, String(v))));
  }
  for (const [k, v] of Object.entries(rec.headers || {})) {
    $('rec-fields').append(el('tr', {}, el('td', {}, 'header ' + k), el('td', {}, v)));
  }
  const ro = state.config.read_only;
  $('rec-replay').disabled = ro || !rec.envelope;
  $('rec-discard').disabled = ro;
  for (const name of state.config.repairs) {
    const applies = rec.repairs.includes(name);
    $('rec-repairs').append(el('button', {
      type: 'button', class: applies ? '' : 'muted', title: applies ? 'applies to this class' : 'not the repair for this class',
      on: { click: () => previewRepair(base, name) },
    }, 'Preview ' + name));
  }
  $('rec-map').hidden = true;
  if (!rec.envelope) return;
  if (rec.geometry && rec.geometry.missing) {
    $('rec-note').textContent = 'The event has no geometry.';
    return;
  }
  $('rec-map').hidden = false;
  try {
    const g = await api(base + '/geometry');
    if (!fresh()) return;
    recMap = makeDetailMap($('rec-map'), g);
    window.geodlqRecMap = recMap; // for the browser tests
    $('rec-note').textContent = [g.type + ', ' + g.vertices + ' vertices', g.note].filter(Boolean).join('. ');
    g.markers.forEach((mk, i) => {
      const a = el('button', { type: 'button', class: 'link', title: 'zoom the map to it', on: { click: () => zoomToFault(recMap, i) } },
        mk.kind.replace('_', ' ') + ': ' + mk.label);
      $('rec-markers').append(el('li', { class: 'k-' + mk.kind, data: { fault: i } }, a));
    });
    if (g.markers.length) {
      $('rec-markers').append(el('li', { class: 'whole' }, el('button', {
        type: 'button', class: 'link', on: { click: () => { if (recMap && recMap.geodlqWhole) recMap.fitBounds(recMap.geodlqWhole, { padding: [20, 20], animate: false }); } },
      }, 'whole geometry')));
    }
  } catch (err) {
    if (fresh()) $('rec-note').textContent = 'Geometry: ' + err.message;
  }
}

async function showPayload() {
  const o = state.open;
  if (!o) return;
  const base = '/api/records/' + encodeURIComponent(o.destination) + '/' + encodeURIComponent(o.id);
  try {
    const p = await api(base + '/payload');
    $('payload-verified').textContent = '(' + p.size + ' bytes, sha256 verified' + (p.truncated ? ', first 256 KiB shown' : '') + ')';
    $('payload-text').textContent = p.text;
    const t = $('payload-props');
    clear(t);
    for (const pr of p.properties || []) t.append(el('tr', {}, el('td', {}, pr.name), el('td', {}, pr.value)));
  } catch (err) {
    $('payload-verified').textContent = '';
    $('payload-text').textContent = err.message;
  }
}

async function previewRepair(base, method) {
  const out = $('repair-out');
  out.dataset.state = 'running';
  try {
    await showRepair(out, base, method);
  } finally {
    out.dataset.state = 'done';
  }
}

async function showRepair(out, base, method) {
  clear(out);
  out.append(el('p', { class: 'muted' }, 'Running ' + method + '…'));
  let r;
  try {
    r = await api(base + '/repair?method=' + encodeURIComponent(method));
  } catch (err) {
    clear(out);
    out.append(el('p', { class: 'error' }, err.message));
    return;
  }
  clear(out);
  if (!r.ok) {
    out.append(el('p', { class: 'bad' }, method + ' does not apply: ' + r.error));
    return;
  }
  out.append(el('p', {}, r.detail + ': ' + (r.type_before || '?') + ' ' + r.vertices_before + ' vertices → ' +
    (r.type_after || '?') + ' ' + r.vertices_after + ' vertices. ', el('span', { class: r.valid_after ? 'good' : 'bad' },
    r.valid_after ? 'The result passes the check.' : 'The result still fails: ' + r.reason_after)));
  const pair = el('div', { class: 'pair' });
  const side = (title, g) => {
    const box = el('div', {}, el('div', { class: 'muted' }, title));
    const mm = el('div', { class: 'mini-map' });
    box.append(mm);
    pair.append(box);
    if (g) requestAnimationFrame(() => makeDetailMap(mm, g, true));
  };
  side('Before', r.before);
  side('After', r.after);
  out.append(pair);
  out.append(el('p', { class: 'muted attrib' }, 'Basemap: Natural Earth (public domain)'));
}

// ---- jobs (replay, discard) ---------------------------------------------------

const job = { action: '', selection: null, dry: null, real: null, poll: null };

function needToken() {
  if (state.config.read_only) {
    toast('This console is read-only: start geodlq serve with --read-only=false and a token.');
    return true;
  }
  if (!state.token) {
    $('token-dialog').showModal();
    return true;
  }
  return false;
}

function openJob(action, selection, describe, defaultRepairs) {
  if (needToken()) return;
  job.action = action;
  job.selection = selection;
  job.dry = job.real = null;
  job.refreshed = false;
  $('job-title').textContent = (action === 'replay' ? 'Replay ' : 'Discard ') + describe;
  const opts = $('job-options');
  clear(opts);
  if (selection.filter) {
    const ul = el('ul', { id: 'job-filters' });
    for (const [k, v] of describeFilter(selection.filter)) ul.append(el('li', {}, el('b', {}, k + ': '), v));
    if (!ul.firstChild) ul.append(el('li', {}, 'no filter: every open record in the store'));
    opts.append(el('div', { class: 'job-scope' }, 'Acts on every record matching' +
      (state.total !== undefined && state.total !== null ? ' (' + (state.totalAtLeast ? '≥ ' : '') + state.total + ' now)' : '') + ':', ul));
  }
  if (action === 'replay') {
    opts.append(el('p', {}, 'A dry run comes first: it restores and checks each record and says what would happen; nothing is re-injected or acknowledged until you confirm.'));
    const repairs = el('fieldset', {}, el('legend', {}, 'Repairs (as --repair)'));
    for (const r of state.config.repairs) {
      const cb = el('input', { type: 'checkbox', name: 'repair', value: r, id: 'repair-' + r });
      cb.checked = (defaultRepairs || []).includes(r);
      repairs.append(el('label', { class: 'inline' }, cb, r + ({
        'make-valid': ' (GEOS MakeValid, invalid_geometry)',
        reproject: ' (PROJ, crs_mismatch)',
        'reproject+make-valid': ' (PROJ, then MakeValid when the result is invalid, crs_mismatch)',
      }[r] || '')));
    }
    for (const c of state.config.unchanged || []) {
      const cb = el('input', { type: 'checkbox', name: 'unchanged', value: c, id: 'unchanged-' + c });
      repairs.append(el('label', { class: 'inline' }, cb, 'replay ' + c + ' unchanged, no repair (as --unchanged ' + c + ')'));
    }
    opts.append(repairs);
    const target = el('select', { id: 'job-target' });
    for (const t of state.config.targets || []) {
      const o = el('option', { value: t.id }, t.label + (t.store ? ' (this store: only what its own broker delivered)' : ''));
      if (t.default) o.selected = true;
      target.append(o);
    }
    opts.append(el('div', { class: 'job-controls' },
      el('label', {}, 'Target (as --target) ', target),
      el('label', {}, 'Route (as --route) ', el('input', { id: 'job-route', placeholder: 'each envelope\'s source topic' })),
      el('label', {}, 'Rate (as --rate, events/s) ', el('input', { id: 'job-rate', type: 'number', min: '0', step: 'any', placeholder: 'no limit' })),
      el('label', { class: 'inline' }, el('input', { type: 'checkbox', id: 'job-nocheck' }), 'no check (as --no-check)')));
  } else {
    opts.append(el('p', {}, 'A dry run comes first and lists what would be deleted. Discarded records are deleted for good; records leased by a replayer are never deleted.'));
  }
  $('job-status').textContent = '';
  $('job-incomplete').textContent = '';
  $('job-incomplete').hidden = true;
  $('job-error').textContent = '';
  $('job-progress').value = 0;
  clear($('job-counts'));
  clear($('job-items'));
  $('job-dry').disabled = false;
  $('job-confirm').disabled = true;
  $('job-confirm').textContent = action === 'replay' ? 'Confirm replay' : 'Confirm discard';
  $('job-cancel').hidden = true;
  $('job-dialog').showModal();
}

function repairsChosen() {
  return [...document.querySelectorAll('#job-options input[name=repair]:checked')].map((i) => i.value);
}

// describeFilter restates a job's filter in words, as the dialog shows it.
function describeFilter(f) {
  const out = [];
  if (f.destination) out.push(['destination', f.destination]);
  if (f.class && f.class.length) out.push(['class', f.class.join(', ')]);
  if (f.stage && f.stage.length) out.push(['stage', f.stage.join(', ')]);
  if (f.reason && f.reason.length) out.push(['reason kind', f.reason.join(', ')]);
  if (f.epsg && f.epsg.length) out.push(['EPSG', f.epsg.join(', ')]);
  if (f.since) out.push(['since', f.since]);
  if (f.until) out.push(['until', f.until]);
  if (f.source_prefix) out.push(['source prefix', f.source_prefix]);
  if (f.q) out.push(['text', '"' + f.q + '"']);
  if (f.replayed) out.push(['including', 'replayed records']);
  if (f.bbox) out.push(['box', f.bbox]);
  return out;
}

async function startJob(dry) {
  $('job-error').textContent = '';
  const body = { action: job.action, dry_run: dry, repairs: job.action === 'replay' ? repairsChosen() : [] };
  if (job.action === 'replay') {
    body.unchanged = [...document.querySelectorAll('#job-options input[name=unchanged]:checked')].map((i) => i.value);
    body.target = $('job-target').value;
    body.route = $('job-route').value.trim();
    const rate = parseFloat($('job-rate').value);
    if (rate > 0) body.rate = rate;
    body.no_check = $('job-nocheck').checked;
  }
  if (dry) Object.assign(body, job.selection);
  else body.confirm = job.dry.id;
  try {
    const j = await api('/api/jobs', { method: 'POST', body });
    if (dry) job.dry = j; else job.real = j;
    $('job-dry').disabled = true;
    $('job-confirm').disabled = true;
    for (const i of document.querySelectorAll('#job-options input, #job-options select')) i.disabled = true;
    followJob(j.id);
  } catch (err) {
    $('job-error').textContent = err.message;
    if (err.status === 401) {
      state.token = '';
      sessionStorage.removeItem('geodlq-token');
    }
  }
}

function followJob(id) {
  clearInterval(job.poll);
  const tick = async () => {
    let j;
    try { j = await api('/api/jobs/' + encodeURIComponent(id)); } catch (err) { $('job-error').textContent = err.message; return; }
    showJob(j);
    if (j.state !== 'running') clearInterval(job.poll);
  };
  job.poll = setInterval(tick, 400);
  tick();
}

function showJob(j) {
  const verb = j.dry_run ? 'Dry run' : j.action === 'replay' ? 'Replay' : 'Discard';
  $('job-status').textContent = j.phase === 'selecting'
    ? verb + ': selecting the records the filters match… ' + j.selected + ' so far'
    : verb + ' ' + j.state + ': ' + j.done + ' of ' + j.selected + ' records' +
      (j.orphaned_blobs ? '; ' + j.orphaned_blobs + ' offloaded blobs are no longer referenced' : '');
  $('job-incomplete').textContent = j.incomplete ? 'Incomplete: ' + j.incomplete : '';
  $('job-incomplete').hidden = !j.incomplete;
  $('job-status').dataset.state = j.state;
  $('job-status').dataset.dry = String(j.dry_run);
  $('job-progress').max = Math.max(1, j.selected);
  $('job-progress').value = j.done;
  $('job-cancel').hidden = j.state !== 'running';
  $('job-cancel').onclick = () => api('/api/jobs/' + encodeURIComponent(j.id) + '/cancel', { method: 'POST' }).catch((e) => { $('job-error').textContent = e.message; });
  const counts = $('job-counts');
  clear(counts);
  for (const [k, v] of Object.entries(j.counts).sort()) counts.append(el('span', { class: 'badge-count', data: { outcome: k } }, k + ' ' + v + '  '));
  const t = $('job-items');
  clear(t);
  t.append(el('tr', {}, el('th', {}, 'Record'), el('th', {}, 'Event'), el('th', {}, 'Outcome'), el('th', {}, 'Repair / why')));
  for (const it of j.items) {
    const attention = /fail|skipped|left|unavailable|interrupted/.test(it.outcome);
    t.append(el('tr', { class: attention ? 'attention' : '', data: { outcome: it.outcome } }, el('td', {}, it.destination + '/' + it.record_id), el('td', {}, it.event_id || '–'),
      el('td', {}, it.outcome + (it.target ? ' → ' + it.target : '')),
      el('td', {}, [it.repair, it.error, it.why].filter(Boolean).join(' — '))));
  }
  if (j.items_total > j.items.length) t.append(el('tr', {}, el('td', { colspan: 4, class: 'muted' }, (j.items_total - j.items.length) + ' more (GET /api/jobs/' + j.id + '?offset=…)')));
  if (j.error) $('job-error').textContent = j.error;
  if (j.dry_run && j.state === 'done') {
    const would = (j.counts.would_replay || 0) + (j.counts.would_repair || 0) + (j.counts.would_discard || 0);
    $('job-confirm').disabled = would === 0;
    $('job-confirm').textContent = (j.action === 'replay' ? 'Confirm replay of ' : 'Confirm discard of ') + would + ' record' + (would === 1 ? '' : 's');
  }
  if (!j.dry_run && j.state !== 'running' && !job.refreshed) {
    job.refreshed = true;
    refreshAll();
    const o = state.open;
    if (o && j.action === 'discard' && j.items.some((it) => it.outcome === 'discarded' && it.destination === o.destination && it.record_id === o.id)) {
      $('rec-close').click();
    } else if (o) {
      openRecord(o.destination, o.id);
    }
  }
}

function selectionFor() {
  if (state.selected.size > 0) {
    return { sel: { records: [...state.selected.values()] }, describe: state.selected.size + ' selected record(s)' };
  }
  return { sel: { filter: filterObject() }, describe: 'every record matching the filters' };
}

// ---- live -------------------------------------------------------------------

function live() {
  const es = new EventSource('/api/events');
  let timer = null;
  const soon = () => {
    clearTimeout(timer);
    timer = setTimeout(() => {
      loadOverview().catch(() => {});
      loadMap().catch(() => {});
      if (state.cursors.length <= 1 && !state.cursor) loadList().catch(() => {});
    }, 300);
  };
  es.addEventListener('open', () => $('live').classList.add('on'));
  es.addEventListener('error', () => $('live').classList.remove('on'));
  es.addEventListener('hello', (e) => indexStatus(JSON.parse(e.data)));
  es.addEventListener('index', (e) => { indexStatus(JSON.parse(e.data)); soon(); });
  es.addEventListener('records', (e) => {
    const d = JSON.parse(e.data);
    toast(d.new + ' new dead letter' + (d.new === 1 ? '' : 's') + (d.latest && d.latest[0] ? ': ' + d.latest.map((r) => r.event_id || r.id).slice(0, 3).join(', ') : ''));
    soon();
  });
  es.addEventListener('changed', soon);
}

// ---- wiring -------------------------------------------------------------------

function wire() {
  $('filters').addEventListener('submit', (e) => { e.preventDefault(); applyFilters(); });
  $('reset-filters').addEventListener('click', () => {
    $('filters').reset();
    state.bbox = null;
    if (boxLayer) { boxLayer.remove(); boxLayer = null; }
    showBox();
    applyFilters();
  });
  $('sort').addEventListener('change', applyFilters);
  $('next').addEventListener('click', () => {
    if (!state.next) return;
    state.cursor = state.next;
    state.cursors.push(state.cursor);
    loadList().catch(listError);
  });
  $('prev').addEventListener('click', () => {
    if (state.cursors.length <= 1) return;
    state.cursors.pop();
    state.cursor = state.cursors[state.cursors.length - 1];
    loadList().catch(listError);
  });
  $('first').addEventListener('click', () => {
    state.cursors = [''];
    state.cursor = '';
    loadList().catch(listError);
  });
  $('check-all').addEventListener('change', (e) => {
    for (const r of state.rows) {
      const key = r.destination + '\u0000' + r.id;
      if (e.target.checked) state.selected.set(key, { destination: r.destination, id: r.id });
      else state.selected.delete(key);
    }
    for (const cb of document.querySelectorAll('#rows input[type=checkbox]')) cb.checked = e.target.checked;
    selectionButtons();
  });
  $('rec-close').addEventListener('click', () => {
    $('record').hidden = true;
    state.open = null;
    map.invalidateSize();
    if (recMap) { recMap.remove(); recMap = null; }
  });
  $('payload-show').addEventListener('click', showPayload);
  $('rec-replay').addEventListener('click', async () => {
    const o = state.open;
    let rec = {};
    try { rec = await api('/api/records/' + encodeURIComponent(o.destination) + '/' + encodeURIComponent(o.id)); } catch { /* shown by the dry run */ }
    openJob('replay', { records: [o] }, (rec.event_id || o.id), rec.repairs);
  });
  $('rec-discard').addEventListener('click', () => {
    const o = state.open;
    openJob('discard', { records: [o] }, o.destination + '/' + o.id);
  });
  $('replay-sel').addEventListener('click', () => {
    const { sel, describe } = selectionFor();
    openJob('replay', sel, describe, []);
  });
  $('discard-sel').addEventListener('click', () => {
    const { sel, describe } = selectionFor();
    openJob('discard', sel, describe);
  });
  $('job-dry').addEventListener('click', () => startJob(true));
  $('job-confirm').addEventListener('click', () => startJob(false));
  $('job-dialog').addEventListener('close', () => clearInterval(job.poll));
  $('unlock').addEventListener('click', () => $('token-dialog').showModal());
  $('token-dialog').addEventListener('close', () => {
    if ($('token-dialog').returnValue === 'ok' && $('token-input').value) {
      state.token = $('token-input').value;
      sessionStorage.setItem('geodlq-token', state.token);
      $('token-input').value = '';
      loadConfig().then(selectionButtons);
    }
  });
}

async function main() {
  wire();
  try {
    await loadConfig();
  } catch (err) {
    showFilterError(err);
    return;
  }
  initMap();
  readFilters();
  await refreshAll();
  live();
  document.body.dataset.ready = 'true';
}

main();
