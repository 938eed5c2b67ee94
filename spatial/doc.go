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
// EPSG codes, validates topology, and, given GEOS and PROJ through
// [Options], repairs geometries with GEOS's MakeValid and reprojects them
// with PROJ. Every error it returns is a [*classify.Error]; no input makes
// it panic.
//
// # Validity: GEOS's answers in pure Go
//
// Topology is checked by default by geodlq's pure-Go port of GEOS 3.11's
// IsValidOp (internal/validity, [EngineGo]): it follows GEOS's algorithm
// step by step, so it gives GEOS's verdict, GEOS's reason word for word
// ("Self-intersection[-65.790374874971 18.3107955487033]"), the same point
// and so the same fault index, with no cgo call. [Options].Engine =
// [EngineGEOS] asks GEOS itself instead, through Options.GEOS; the tests
// of package spatial/geos run both over every corpus, GEOS's own isValid
// cases and a differential fuzz target, and fail on any difference.
//
// # No cgo here: GEOS and PROJ are injected
//
// Package spatial is pure Go in every build (a test fails if it gains a
// cgo file). Checking needs no C: CheckEvent, CheckGeometry, CheckCRS,
// ResolveCRS and the pure-Go validity engine work with CGO_ENABLED=0, and
// CRSs resolve from internal/epsg, a registry of EPSG's and OGC's CRSs
// generated from PROJ's proj.db (go generate), which answers every EPSG
// code, urn:ogc:def:crs:EPSG::n, opengis.net URL and OGC
// CRS84/CRS83/CRS27 exactly as PROJ does (a differential test in
// spatial/proj checks every code). WKT and PROJJSON of a geographic or
// projected CRS naming its EPSG (or OGC) code at the top level resolve
// from the registry too, with PROJ's answer (read with depth and length
// bounds, and only when the registry's kind and axis order agree, since
// PROJ drops an identifier the definition contradicts).
//
// What only GEOS or PROJ can do is injected through [Options], behind
// two small interfaces and a function: [GEOS] (MakeValid, [EngineGEOS]),
// [Reprojector] (Reproject) and Options.ResolveCRS (CRS definitions the
// registry does not resolve). Packages spatial/geos and spatial/proj implement them with
// cgo, and their documentation says what linking GEOS and PROJ costs.
// Without them — and a build without cgo cannot have them: their
// constructors fail with [ErrNeedsCGO] — MakeValid, Reproject, Repairers
// and EngineGEOS fail with an error wrapping [ErrNeedsCGO], and the CRS
// definitions only PROJ resolves (a PROJ string, WKT or PROJJSON without
// an identifier, a compound "EPSG:4326+5773", ESRI and other authorities'
// codes) are a crs_unparseable verdict wrapping [ErrNeedsPROJ], never a
// default CRS.
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
// PROJ strings, PROJJSON, other authorities) goes to Options.ResolveCRS:
// about a millisecond, 2-20 ms of proj_identify for a definition without
// an identifier; results, failures included, are cached in a bounded
// cache. Definitions PROJ would have to search for by name (bare names
// other than CRS84, CRS83, CRS27 and WGS84, unknown authorities, unknown
// WKT keywords) are refused in every build without asking PROJ, which
// matches names approximately ("foo" finds Amersfoort) and slowly.
package spatial
