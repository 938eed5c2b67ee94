// Package spatial checks geospatial events the way a dead-letter path needs
// them checked: it says not only that an event is bad but what class of bad
// (classify.Class), at which pipeline stage (classify.Stage), and where —
// the validity reason, the offending point, and the exact vertex or segment
// in the input's coordinate arrays (classify.Fault).
//
// A [Checker] parses GeoJSON with a lenient pure-Go reader (Python's bare
// NaN and Infinity tokens are accepted in coordinates so they can be
// reported as invalid coordinates at their vertex; unclosed rings are kept
// so they can be reported rather than silently closed), resolves CRSs to
// EPSG codes with PROJ, validates topology, repairs geometries with GEOS's
// MakeValid and reprojects them with PROJ. Every error it returns is a
// [*classify.Error]; no input makes it panic.
//
// # Validity: GEOS's answers in pure Go
//
// Topology is checked by default by geodlq's pure-Go port of GEOS 3.11's
// IsValidOp (internal/validity, [EngineGo]): it follows GEOS's algorithm
// step by step, so it gives GEOS's verdict, GEOS's reason word for word
// ("Self-intersection[-65.790374874971 18.3107955487033]"), the same point
// and so the same fault index, with no cgo call. [Options].Engine =
// [EngineGEOS] asks GEOS itself instead; the tests run both over every
// corpus, GEOS's own isValid cases and a differential fuzz target, and
// fail on any difference.
//
// # cgo, and what it costs
//
// This is geodlq's only cgo package. It links GEOS (via
// github.com/twpayne/go-geos) and PROJ (via github.com/twpayne/go-proj and
// a small C shim for EPSG lookup, which go-proj does not expose). Be clear
// about what that means before importing it:
//
//   - Building needs a C toolchain and the GEOS and PROJ development files
//     (libgeos-dev and libproj-dev on Debian; GEOS >= 3.10 for MakeValid's
//     "structure" method, PROJ >= 8). Cross-compiling needs a C
//     cross-toolchain and target libraries; CGO_ENABLED=0 builds drop the
//     package. The parsing and structural rules live in a pure-Go
//     package of this module (internal/geojson), and so does the validity
//     engine (internal/validity), so geodlq's cgo-free components (an
//     ingress gate, say) apply the same rules; PROJ (CRS resolution,
//     reprojection) and GEOS (MakeValid, [EngineGEOS]) need cgo.
//   - Every cgo call costs tens of nanoseconds on top of the work, and the
//     geometry must cross the boundary: with [EngineGEOS] it is built in
//     GEOS from the parser's positions and checked in a single call. On a
//     small polygon the whole CheckEvent (parse, cached CRS lookup, range
//     check, validity) takes a few microseconds; see the benchmarks.
//   - GEOS and PROJ objects live on the C heap, which the Go garbage
//     collector neither sees nor counts. The checker destroys GEOS
//     geometries as soon as it is done with them; GEOS contexts, PROJ
//     contexts and transformations are bounded (a pool of GEOS contexts
//     sized to GOMAXPROCS, one PROJ context for CRS resolution, one for
//     reprojection, and bounded caches). Close releases them; a forgotten
//     Close is caught by finalizers, eventually.
//   - Neither library's handles are goroutine-safe. GEOS contexts are
//     pooled so concurrent checks do not wait for each other; CRS
//     resolution and reprojection each serialise on their PROJ context,
//     which is cheap because resolutions are cached (a hit is a map lookup
//     under a read lock) and reprojection is rare.
//   - A GEOS exception surfaces in go-geos as a panic; the checker
//     recovers it and returns an error of class unknown, so a GEOS bug
//     cannot take the consumer down. Inputs GEOS would reject or silently
//     repair (unclosed rings, rings of fewer than four positions,
//     non-finite coordinates) are caught in Go before GEOS sees them.
//
// # CRS resolution
//
// PROJ resolution is slow (about a millisecond for a well-formed EPSG code,
// tens to hundreds of milliseconds for strings PROJ has to search for), so
// results, failures included, are cached in a bounded cache. OGC:CRS84,
// urn:ogc:def:crs:OGC:1.3:CRS84 and CRS84, RFC 7946's CRS, resolve to 4326:
// they are WGS 84 in lon/lat order, which is the order GeoJSON always uses.
// An event without a CRS, or with "crs": null, is in CRS84. Definitions
// PROJ would have to search for by name (bare names other than CRS84,
// CRS83, CRS27 and WGS84, unknown authorities, unknown WKT keywords) are
// refused without asking PROJ, which matches names approximately ("foo"
// finds Amersfoort) and slowly. With that, PROJ spends about a millisecond
// refusing junk; a well-formed definition without an identifier (a PROJ
// string or WKT) costs 2-20 ms of proj_identify the first time it is seen.
package spatial
