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
const basemap = {
  type: 'FeatureCollection',
  attribution: 'Natural Earth (public domain), via world-atlas',
  features: countries.features.map((f) => ({
    type: 'Feature',
    properties: { name: f.properties.name },
    geometry: { type: f.geometry.type, coordinates: roundCoords(f.geometry.coordinates) },
  })),
};
writeFileSync(join(out, 'assets/basemap.json'), JSON.stringify(basemap));

copyFileSync(join(here, 'src/index.html'), join(out, 'index.html'));
copyFileSync(join(here, 'src/favicon.svg'), join(out, 'assets/favicon.svg'));
