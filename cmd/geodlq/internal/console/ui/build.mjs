// Builds the console page into an output directory (default dist/):
//   index.html, assets/app.js, assets/app.css (Leaflet's CSS included),
//   assets/basemap.json (Natural Earth 1:110m countries from world-atlas,
//   public domain, coordinates rounded to 0.01°) and the images Leaflet's
//   CSS refers to.
// The output depends only on the sources and the lockfile's packages, so
// a fresh build equals the committed dist/ byte for byte (the Go test
// TestAssetsMatchFreshBuild checks it).
//
// Usage: node build.mjs [outdir]
import { build } from 'esbuild';
import { readFileSync, writeFileSync, mkdirSync, rmSync, copyFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { feature } from 'topojson-client';

const here = dirname(fileURLToPath(import.meta.url));
const out = resolve(process.argv[2] || join(here, 'dist'));
rmSync(out, { recursive: true, force: true });
mkdirSync(join(out, 'assets'), { recursive: true });

const common = {
  bundle: true,
  minify: true,
  legalComments: 'none',
  logLevel: 'warning',
  absWorkingDir: here,
  charset: 'utf8',
};

await build({
  ...common,
  entryPoints: [join(here, 'src/app.js')],
  outfile: join(out, 'assets/app.js'),
  format: 'iife',
  target: ['es2020'],
});

await build({
  ...common,
  entryPoints: [join(here, 'src/app.css')],
  outfile: join(out, 'assets/app.css'),
  loader: { '.png': 'file', '.svg': 'file' },
  assetNames: '[name]-[hash]',
});

// The offline basemap: country outlines, small enough to embed.
const topo = JSON.parse(readFileSync(join(here, 'node_modules/world-atlas/countries-110m.json'), 'utf8'));
const countries = feature(topo, topo.objects.countries);
const round = (v) => Math.round(v * 100) / 100;
const roundCoords = (c) => (typeof c[0] === 'number' ? [round(c[0]), round(c[1])] : c.map(roundCoords));
// Polygons that cross ±180° (Fiji, Chukotka) come as rings jumping from
// one side to the other, which a map draws as a line around the world:
// their longitudes are made continuous (past ±180) and a copy shifted by
// 360° draws the part on the other side. A ring around a pole
// (Antarctica) does not close once made continuous and is left alone.
const unwrapRing = (r) => {
  const out = [r[0].slice()];
  for (let i = 1; i < r.length; i++) {
    let x = r[i][0];
    const prev = out[i - 1][0];
    while (x - prev > 180) x -= 360;
    while (x - prev < -180) x += 360;
    out.push([x, r[i][1]]);
  }
  return out;
};
const crosses = (r) => r.some((c, i) => i > 0 && Math.abs(c[0] - r[i - 1][0]) > 180);
const shift = (poly, dx) => poly.map((r) => r.map(([x, y]) => [x + dx, y]));
const splitPolygon = (poly) => {
  if (!poly.some(crosses)) return [poly];
  const un = poly.map(unwrapRing);
  if (un.some((r) => Math.abs(r[r.length - 1][0] - r[0][0]) > 1e-9)) return [poly];
  const xs = un[0].map((c) => c[0]);
  const out = [un];
  if (Math.max(...xs) > 180) out.push(shift(un, -360));
  if (Math.min(...xs) < -180) out.push(shift(un, 360));
  return out;
};
const antimeridian = (g) => {
  const polys = g.type === 'Polygon' ? [g.coordinates] : g.type === 'MultiPolygon' ? g.coordinates : null;
  if (!polys) return g;
  const out = polys.flatMap(splitPolygon);
  return out.length === 1 ? { type: 'Polygon', coordinates: out[0] } : { type: 'MultiPolygon', coordinates: out };
};
const basemap = {
  type: 'FeatureCollection',
  attribution: 'Natural Earth (public domain), via world-atlas',
  features: countries.features.map((f) => {
    const g = antimeridian(f.geometry);
    return { type: 'Feature', properties: { name: f.properties.name }, geometry: { type: g.type, coordinates: roundCoords(g.coordinates) } };
  }),
};
writeFileSync(join(out, 'assets/basemap.json'), JSON.stringify(basemap));

copyFileSync(join(here, 'src/index.html'), join(out, 'index.html'));
copyFileSync(join(here, 'src/favicon.svg'), join(out, 'assets/favicon.svg'));
