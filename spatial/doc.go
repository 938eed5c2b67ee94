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
// This is geodlq's only cgo package, and checking does not need its cgo
// half. Built with CGO_ENABLED=0 (the cgo build tag off) it is pure Go:
// CheckEvent, CheckGeometry, CheckCRS, ResolveCRS and the pure-Go validity
// engine work, and CRSs resolve from internal/epsg, a registry of EPSG's
// and OGC's CRSs generated from PROJ's proj.db (go generate), which
// answers every EPSG code, urn:ogc:def:crs:EPSG::n, opengis.net URL and
// OGC CRS84/CRS83/CRS27 exactly as PROJ does (a differential test in the
// cgo build checks every code). What only GEOS or PROJ can do fails there
// with an error wrapping [ErrNeedsCGO]: MakeValid, Reproject, Repairers,
// PROJJSON and [EngineGEOS]. WKT and PROJJSON of a geographic or
// projected CRS naming its EPSG (or OGC) code at the top level resolve
// from the registry too, with PROJ's answer (read with depth and length
// bounds, and only when the registry's kind and axis order agree, since
// PROJ drops an identifier the definition contradicts). CRS definitions
// only PROJ resolves (a PROJ string, WKT or PROJJSON without such an
// identifier, a compound "EPSG:4326+5773", ESRI and other authorities'
// codes) are a crs_unparseable verdict wrapping [ErrNeedsPROJ], never a
// default CRS.
//
// With cgo (the default where a C toolchain is present) it also links
// GEOS (via github.com/twpayne/go-geos) and PROJ (via
// github.com/twpayne/go-proj and a small C shim for EPSG lookup, which
// go-proj does not expose). Be clear about what that means:
//
//   - Building needs a C toolchain and the GEOS and PROJ development files
//     (libgeos-dev and libproj-dev on Debian; GEOS >= 3.10 for MakeValid's
//     "structure" method, PROJ >= 8). Cross-compiling needs a C
//     cross-toolchain and target libraries; a CGO_ENABLED=0 build needs
//     neither and is one static binary (the Lambda examples' bootstrap).
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
// EPSG codes and OGC's CRS84, CRS83 and CRS27, in every spelling PROJ
// accepts ("EPSG:4326", "epsg:4326", "urn:ogc:def:crs:EPSG::4326",
// "urn:ogc:def:crs:EPSG:9.8:4326", "http://www.opengis.net/def/crs/EPSG/0/4326",
// "OGC:CRS84", "CRS84", "urn:ogc:def:crs:OGC:1.3:CRS84", ...), resolve
// from the generated registry in every build, in about a
// microsecond. OGC:CRS84 and its spellings, RFC 7946's CRS, resolve to
// 4326: WGS 84 in lon/lat order, which is the order GeoJSON always uses.
// An event without a CRS, or with "crs": null, is in CRS84. The rest (WKT,
// PROJ strings, PROJJSON, other authorities) goes to PROJ in a cgo build:
// about a millisecond, 2-20 ms of proj_identify for a definition without
// an identifier; results, failures included, are cached in a bounded
// cache. Definitions PROJ would have to search for by name (bare names
// other than CRS84, CRS83, CRS27 and WGS84, unknown authorities, unknown
// WKT keywords) are refused in every build without asking PROJ, which
// matches names approximately ("foo" finds Amersfoort) and slowly.
package spatial
