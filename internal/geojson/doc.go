// Package geojson reads and writes the GeoJSON that geodlq validates, in
// pure Go, so that an ingress gate built without cgo applies exactly the
// rules the cgo-based spatial package applies.
//
// The reader is lenient where real producers are sloppy and strict where
// sloppiness would hide a fault:
//
//   - Inside coordinate arrays it accepts the bare tokens NaN, Infinity and
//     -Infinity that Python's json module emits, so that [Validate] can
//     report them as invalid coordinates at the offending vertex instead of
//     rejecting the whole payload as "not JSON". Everywhere else the input
//     must be RFC 8259 JSON.
//   - Rings are kept exactly as written. GEOS and orb's own decoders close
//     an unclosed ring silently; here [Validate] reports it.
//   - Members may come in any order ("coordinates" before "type" costs a
//     second pass over the coordinates). Duplicate "type", "coordinates",
//     "geometries", "geometry" or "crs" members are rejected as ambiguous.
//
// A document ends where its value ends: only RFC 8259 white space (space,
// tab, CR, LF) may follow it. Any other byte — NUL included — is an error
// at its offset, as it is for internal/jsonscan and encoding/json, so every
// reader of a payload agrees on where it ends.
//
// Hostile input is bounded by [Limits], each enforced before the work it
// bounds: positions (MaxVertices), coordinate arrays and collection
// members (MaxParts), holes per polygon (MaxHoles), GeometryCollection nesting (MaxNesting, at most
// [CeilingMaxNesting]), nesting inside skipped values (MaxDepth; skipping
// is iterative) and the length of converted numbers (MaxNumberLength).
// The walkers of parsed geometries ([Components], [Walk]) are iterative.
//
// Parsing is allocation-light: all positions of a document share one
// backing array of orb.Point and the orb rings, lines and multi-geometries
// are capped sub-slices of it; no map[string]any is built.
//
// Positions keep at most three ordinates; the third is kept in
// [Geometry.Z], further ones are read and dropped.
//
// [Validate], [CheckFinite] and [CheckRange] return a *classify.Error, not
// an error, so that callers can add to its detail (the EPSG code, say).
// Test the result against nil before storing it in an error variable: a
// nil *classify.Error in an error interface is not a nil error.
package geojson
