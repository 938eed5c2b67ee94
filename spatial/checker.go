package spatial

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/internal/geojson"
	"github.com/geodlq/geodlq/internal/telemetry"
	"github.com/geodlq/geodlq/spatial/internal/clockcache"
)

// Option defaults, used for zero fields of [Options].
const (
	DefaultExpectedEPSG       = 4326
	DefaultMaxVertices        = 5_000_000
	DefaultMaxParts           = 200_000
	DefaultMaxHoles           = 10_000
	DefaultMaxBytes           = 64 << 20
	DefaultCRSCacheSize       = 1024
	DefaultMaxRepairVertices  = 100_000
	DefaultMaxRepairParts     = 10_000
	DefaultMaxRepairCrossings = 10_000
)

// Engine selects the validity engine of a [Checker]'s topology check.
type Engine uint8

// The validity engines.
const (
	// EngineGo is geodlq's pure-Go validity engine (internal/validity): it
	// follows GEOS 3.11's algorithm step by step and gives GEOS's verdict,
	// reason, point and so fault index for every geometry, without cgo in
	// the check path. It is the default.
	EngineGo Engine = iota
	// EngineGEOS is GEOS's GEOSisValidReason_r, through the engine of
	// Options.GEOS (package spatial/geos, a cgo build).
	EngineGEOS
)

// String returns "go" or "geos".
func (e Engine) String() string {
	switch e {
	case EngineGo:
		return "go"
	case EngineGEOS:
		return "geos"
	}
	return fmt.Sprintf("Engine(%d)", uint8(e))
}

// ErrClosed is wrapped by the errors of a [Checker] used after Close. It
// is not broker.ErrClosed, which stands for a closed store or consumer
// (docs/api.md).
var ErrClosed = errors.New("spatial: checker is closed")

// Options configures a [Checker]. The zero value and nil use the defaults.
type Options struct {
	// ExpectedEPSG is the EPSG code of the CRS the pipeline works in;
	// CheckEvent fails events whose CRS resolves to another code. RFC
	// 7946's OGC:CRS84 resolves to 4326. Default 4326.
	ExpectedEPSG int
	// MaxVertices is the most positions a geometry may have; more fail
	// with resource_exhausted (kind vertex_budget) as soon as the parser
	// reads one too many. Default 5,000,000; negative means no limit.
	MaxVertices int
	// MaxParts is the most rings, lines, polygons and collection members
	// (each coordinate array above the positions, and each collection
	// member) a geometry may have, and MaxHoles the most holes of one
	// polygon; more fail with resource_exhausted (kind vertex_budget) as
	// soon as the parser opens one too many. GEOS keeps hundreds of bytes
	// per part, and about a kilobyte per hole, while it checks validity,
	// so these bound the memory of geometries of many small parts, which
	// the vertex budget does not. Defaults 200,000 and 10,000; negative
	// means no limit.
	MaxParts, MaxHoles int
	// MaxBytes is the largest payload or geometry accepted; larger ones
	// fail with resource_exhausted (kind byte_budget) before parsing.
	// Default 64 MiB; negative means no limit.
	MaxBytes int
	// CRSCacheSize bounds the number of CRS definitions whose resolution
	// (success or failure) is cached. Definitions longer than 8 KiB are
	// refused and never cached, so the cache holds at most
	// CRSCacheSize × 8 KiB of keys. Default 1024.
	CRSCacheSize int
	// MaxRepairVertices, MaxRepairParts and MaxRepairCrossings bound what
	// MakeValid (and so the invalid_geometry repairer) hands to GEOS,
	// whose repair costs grow much faster than its input and cannot be
	// interrupted: a 21 KB star polygon with half a million segment
	// crossings takes it half a minute, a polygon with 100,000 holes as
	// long, and a million-position ring with one crossing 300 MB. A
	// geometry with more positions, more rings and lines, or more
	// crossings (estimated in bounded work by counting segment pairs in a
	// grid; a geometry the estimate cannot settle counts as over) fails
	// with resource_exhausted, kind vertex_budget, before GEOS sees it, and
	// is left for a person. Defaults 100,000, 10,000 and 10,000; negative
	// means no limit.
	MaxRepairVertices, MaxRepairParts, MaxRepairCrossings int
	// Engine is the validity engine of CheckEvent and CheckGeometry's
	// topology check. Default EngineGo (the zero value): geodlq's pure-Go
	// port of GEOS 3.11's IsValidOp, which gives GEOS's verdicts, reasons
	// and points. EngineGEOS asks GEOS itself, through Options.GEOS, which
	// it requires. MakeValid always uses GEOS.
	Engine Engine
	// GEOS is the GEOS engine of MakeValid, the invalid_geometry repairer
	// and EngineGEOS: spatial/geos.New's, in a cgo build. Nil (the
	// default): those fail with an error wrapping [ErrNeedsCGO], and
	// checking with EngineGo works as ever. The Checker does not close it.
	GEOS GEOS
	// ResolveCRS resolves the CRS definitions the pure-Go registry does
	// not (WKT and PROJJSON without a top-level EPSG identifier, PROJ
	// strings, compound CRSs, other authorities): the ResolveCRS method of
	// spatial/proj.New's PROJ, in a cgo build. It must be safe for
	// concurrent use; the Checker caches its answers (bounded by
	// CRSCacheSize) and asks only about well-formed definitions naming
	// known authorities, never about bare names (see [Checker.ResolveCRS]).
	// A definition it refuses is a [*CRSError] (a crs_unparseable verdict,
	// cached; the Checker fills in Definition); any other error (it is
	// closed) is reported with its text and not cached. Nil (the default):
	// WKT and PROJJSON naming their EPSG (or OGC) code at the top level
	// resolve without it, and the rest is a crs_unparseable verdict
	// wrapping [ErrNeedsPROJ].
	ResolveCRS func(def string) (CRSInfo, error)
	// Reprojector transforms positions for Reproject and the crs_mismatch
	// repairer: spatial/proj.New's, in a cgo build. Nil (the default):
	// those fail with an error wrapping [ErrNeedsCGO]. The Checker does not
	// close it.
	Reprojector Reprojector
	// MeterProvider records geodlq.checks by result class ("ok" for a
	// valid event) from [Checker.CheckEventContext]. Nil records nothing.
	MeterProvider metric.MeterProvider
	// TracerProvider traces geodlq.check spans from
	// [Checker.CheckEventContext]. Nil traces nothing.
	TracerProvider trace.TracerProvider
}

// Checker validates geospatial events, in pure Go; GEOS and PROJ, when
// injected through [Options], repair, reproject and resolve what the
// registry does not. It is safe for concurrent use; create one per process
// (it caches CRS resolutions) and Close it when done.
type Checker struct {
	opts     Options
	lim      geojson.Limits
	crsCache *clockcache.Cache[string, crsEntry]
	closed   atomic.Bool
	tel      *telemetry.Instruments
	// registryOff (tests) sends every CRS to Options.ResolveCRS,
	// bypassing the registry: the differential tests' oracle.
	registryOff bool
}

// NewChecker returns a Checker configured by opts (nil for the defaults).
// It fails for a negative ExpectedEPSG or cache size, an unknown Engine,
// or EngineGEOS without Options.GEOS (wrapping [ErrNeedsCGO]).
func NewChecker(opts *Options) (*Checker, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.ExpectedEPSG < 0 || o.CRSCacheSize < 0 {
		return nil, errors.New("spatial: negative ExpectedEPSG or cache size in Options")
	}
	if o.Engine > EngineGEOS {
		return nil, fmt.Errorf("spatial: unknown validity engine %v in Options", o.Engine)
	}
	if o.Engine == EngineGEOS && o.GEOS == nil {
		return nil, fmt.Errorf("spatial: Options.Engine EngineGEOS without Options.GEOS: %w", ErrNeedsCGO)
	}
	if o.ExpectedEPSG == 0 {
		o.ExpectedEPSG = DefaultExpectedEPSG
	}
	if o.MaxVertices == 0 {
		o.MaxVertices = DefaultMaxVertices
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxParts == 0 {
		o.MaxParts = DefaultMaxParts
	}
	if o.MaxHoles == 0 {
		o.MaxHoles = DefaultMaxHoles
	}
	if o.CRSCacheSize == 0 {
		o.CRSCacheSize = DefaultCRSCacheSize
	}
	if o.MaxRepairVertices == 0 {
		o.MaxRepairVertices = DefaultMaxRepairVertices
	}
	if o.MaxRepairParts == 0 {
		o.MaxRepairParts = DefaultMaxRepairParts
	}
	if o.MaxRepairCrossings == 0 {
		o.MaxRepairCrossings = DefaultMaxRepairCrossings
	}
	c := &Checker{
		opts:     o,
		lim:      geojson.Limits{MaxVertices: o.MaxVertices, MaxParts: o.MaxParts, MaxHoles: o.MaxHoles},
		crsCache: clockcache.New[string, crsEntry](o.CRSCacheSize),
		tel:      telemetry.New(o.MeterProvider, o.TracerProvider),
	}
	return c, nil
}

// Options returns the checker's options with defaults filled in.
func (c *Checker) Options() Options { return c.opts }

// Close drops the checker's CRS cache. Calls made after Close fail with
// an error wrapping [ErrClosed]; calls in flight finish. What Options.GEOS,
// ResolveCRS and Reprojector use is left open: its owner closes it after
// the Checker. Close is idempotent and always returns
// nil.
func (c *Checker) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	c.crsCache.Clear()
	return nil
}

func errClosed(stage classify.Stage) *classify.Error {
	return &classify.Error{
		Class:    classify.ClassUnknown,
		Stage:    stage,
		Geometry: &classify.GeometryDetail{Reason: ErrClosed.Error(), Kind: classify.KindOther},
		Err:      ErrClosed,
	}
}

// Result is what [Checker.CheckEvent] learned about an event, filled as far
// as checking got even when it fails.
type Result struct {
	// GeometryType is the GeoJSON type of the geometry ("Polygon", …).
	GeometryType string
	// VertexCount is the number of positions in the geometry.
	VertexCount int
	// DeclaredCRS is the event's CRS as declared: the "crs" string, the
	// named CRS object's name, "EPSG:<n>" for an integer; "" when the
	// event has no "crs" member or it is null.
	DeclaredCRS string
	// CRS is the definition that was resolved: DeclaredCRS, or "OGC:CRS84"
	// (RFC 7946's default) when none (or an empty string) was declared.
	CRS string
	// EPSG is the EPSG code the CRS resolved to (4326 for OGC:CRS84), or 0.
	EPSG int
	// CRSName is PROJ's name for the CRS, such as "WGS 84 (CRS84)".
	CRSName string
	// Geographic is true when the CRS is geographic (lon/lat).
	Geographic bool
}

// CheckGeometry validates a GeoJSON geometry object (the bytes of the
// geometry alone, not an event or Feature). It returns nil for a valid
// geometry and otherwise a [*classify.Error]:
//
//   - resource_exhausted at parse: more than MaxBytes, MaxVertices,
//     MaxParts or MaxHoles;
//   - schema_violation at parse: not JSON, no or null "type",
//     "coordinates" or geometry, unknown type, wrong nesting for the type,
//     non-numeric coordinates, positions of fewer than two numbers
//     (kind malformed or missing_geometry);
//   - invalid_geometry at topology_validation: empty geometry, NaN or
//     infinite coordinates (accepted as bare tokens in coordinates, as
//     Python emits them), unclosed rings, rings of fewer than four
//     positions, and every fault GEOS's IsValidReason reports, with GEOS's
//     reason verbatim, its point as Location, and the vertex or segment it
//     falls on as Fault.
//
// Fault indexes follow classify.Fault, -1 where an index does not apply.
// GEOS's point is matched to the first input vertex equal to it (GEOS
// prints 15 significant digits, so "equal" allows a relative 1e-12), else
// to the first segment it lies on (OnSegment, Vertex = the segment's first
// vertex): the bowtie's Self-intersection[0.5 0.5] is ring 0, segment 0→1.
// An unclosed ring or a ring of too few positions is reported at its first
// position, as GEOS does. For a NaN or infinite coordinate Location is nil
// (JSON cannot carry it); the Reason spells the position out, "Invalid
// Coordinate[NaN 1]", and Fault points at it. Inside a
// GeometryCollection, Part is the member's index and a member's rings and
// lines are numbered consecutively in Ring.
//
// CheckGeometry knows nothing of CRSs; see [Checker.CheckEvent].
func (c *Checker) CheckGeometry(data []byte) error {
	if c.closed.Load() {
		return errClosed(classify.StageParse)
	}
	g, err := c.parseGeometry(data)
	if err != nil {
		return err
	}
	if err := geojson.CheckGeometry(g, false, runtime.GOMAXPROCS(0)); err != nil {
		return err
	}
	if err := c.topology(g); err != nil {
		return err
	}
	return nil
}

// CheckEvent validates an event payload: a JSON object with a "geometry"
// member (a GeoJSON geometry) and an optional "crs" member (a string such
// as "EPSG:4326", a GeoJSON 2008 named CRS object, an integer EPSG code,
// or null). A GeoJSON Feature qualifies. A missing or null "crs" means RFC
// 7946's default, OGC:CRS84, which passes a 4326 pipeline; when the event
// has no "crs" the geometry object's own (GeoJSON 2008) "crs" is used.
//
// Checks run in pipeline order and the first failure is returned, as a
// [*classify.Error] with its stage:
//
//  1. parse: size budget, JSON, GeoJSON structure, vertex budget
//     (schema_violation or resource_exhausted; a missing or null geometry
//     or null coordinates is a schema_violation, kind missing_geometry);
//  2. crs_transform: the CRS must resolve (crs_mismatch, kind
//     crs_unparseable, with PROJ's message) to Options.ExpectedEPSG
//     (crs_mismatch, kind crs_differs, carrying the CRS's EPSG code);
//  3. crs_transform: in a geographic CRS every position must lie within
//     lon [-180, 180] and lat [-90, 90] (crs_mismatch, kind out_of_range,
//     at the first offending vertex): this catches Web Mercator metres
//     labelled EPSG:4326;
//  4. topology_validation: as [Checker.CheckGeometry].
//
// The Result reports what was learned, even on failure; every error's
// geometry detail carries the geometry type, vertex count and resolved
// EPSG code once known.
func (c *Checker) CheckEvent(payload []byte) (Result, error) {
	return c.checkEvent(payload)
}

// CheckEventContext is [Checker.CheckEvent] with a context for telemetry:
// it records a geodlq.check span (with the result class, stage and reason
// kind, never the raw reason) and the geodlq.checks counter.
func (c *Checker) CheckEventContext(ctx context.Context, payload []byte) (Result, error) {
	ctx, span := c.tel.Start(ctx, "geodlq.check", attribute.Int("geodlq.payload_bytes", len(payload)))
	res, err := c.checkEvent(payload)
	result := "ok"
	if err != nil {
		result = classify.Classify(err).String()
		if d := classify.DetailOf(err); d != nil {
			span.SetAttributes(attribute.String("geodlq.reason_kind", string(d.Kind)))
		}
		span.SetAttributes(attribute.String("geodlq.stage", classify.StageOf(err).String()))
	}
	span.SetAttributes(attribute.String("geodlq.result", result), attribute.String("geodlq.geometry_type", res.GeometryType),
		attribute.Int("geodlq.vertex_count", res.VertexCount), attribute.Int("geodlq.epsg", res.EPSG))
	c.tel.Checks.Add(ctx, 1, metric.WithAttributes(attribute.String("result", result)))
	telemetry.End(span, err)
	return res, err
}

func (c *Checker) checkEvent(payload []byte) (Result, error) {
	var res Result
	if c.closed.Load() {
		return res, errClosed(classify.StageParse)
	}
	if err := c.checkBytes(len(payload)); err != nil {
		return res, err
	}
	ev, err := geojson.ParseEvent(payload, c.limits())
	if err != nil {
		return res, parseError(err)
	}
	g := ev.Geometry
	res.GeometryType, res.VertexCount = g.Geom.GeoJSONType(), g.Vertices
	res.DeclaredCRS = ev.CRS.Name
	res.CRS = ev.CRS.Name
	if strings.TrimSpace(res.CRS) == "" && ev.CRS.Form != geojson.CRSLinked {
		res.CRS = defaultCRS // absent, null or ""
	}

	var info CRSInfo
	var cerr *classify.Error
	if ev.CRS.Form == geojson.CRSLinked {
		cerr = unparseable(&CRSError{Definition: ev.CRS.Name, Message: "linked CRS objects (GeoJSON 2008) cannot be resolved"})
	} else {
		info, cerr = c.checkCRS(res.CRS, c.opts.ExpectedEPSG)
	}
	res.EPSG, res.CRSName, res.Geographic = info.EPSG, info.Name, info.Geographic
	if cerr != nil {
		fillDetail(cerr, g)
		return res, cerr
	}
	// The range check (geographic CRSs) and then Validate; a large
	// MultiPolygon's polygons are checked on every CPU.
	if err := geojson.CheckGeometry(g, info.Geographic, runtime.GOMAXPROCS(0)); err != nil {
		err.Geometry.EPSG = info.EPSG
		return res, err
	}
	if err := c.topology(g); err != nil {
		err.Geometry.EPSG = info.EPSG
		return res, err
	}
	return res, nil
}

// limits are the parse limits, with a worker per CPU: a large
// MultiPolygon's coordinates are read in parallel (the result does not
// depend on how many).
func (c *Checker) limits() geojson.Limits {
	l := c.lim
	l.Workers = runtime.GOMAXPROCS(0)
	return l
}

// parseGeometry applies the byte budget and parses a geometry object.
func (c *Checker) parseGeometry(data []byte) (geojson.Geometry, *classify.Error) {
	if err := c.checkBytes(len(data)); err != nil {
		return geojson.Geometry{}, err
	}
	g, err := geojson.ParseGeometry(data, c.limits())
	if err != nil {
		return geojson.Geometry{}, parseError(err)
	}
	return g, nil
}

func (c *Checker) checkBytes(n int) *classify.Error {
	if c.opts.MaxBytes < 0 || n <= c.opts.MaxBytes {
		return nil
	}
	reason := fmt.Sprintf("payload of %d bytes exceeds the budget of %d bytes", n, c.opts.MaxBytes)
	return &classify.Error{
		Class:    classify.ClassResourceExhausted,
		Stage:    classify.StageParse,
		Geometry: &classify.GeometryDetail{Reason: reason, Kind: classify.KindByteBudget},
		Err:      errors.New("spatial: " + reason),
	}
}

// parseError classifies a geojson parse error.
func parseError(err error) *classify.Error {
	class, kind := classify.ClassSchemaViolation, classify.KindMalformed
	var ge *geojson.Error
	if errors.As(err, &ge) {
		kind = ge.Kind
		if kind == classify.KindVertexBudget {
			class = classify.ClassResourceExhausted
		}
	}
	return &classify.Error{
		Class:    class,
		Stage:    classify.StageParse,
		Geometry: &classify.GeometryDetail{Reason: err.Error(), Kind: kind},
		Err:      fmt.Errorf("spatial: %w", err),
	}
}

// fillDetail records what is known about g on err's geometry detail.
func fillDetail(err *classify.Error, g geojson.Geometry) {
	if err.Geometry == nil {
		err.Geometry = &classify.GeometryDetail{Reason: err.Error(), Kind: classify.KindOther}
	}
	if g.Geom != nil {
		err.Geometry.GeometryType = g.Geom.GeoJSONType()
		err.Geometry.VertexCount = g.Vertices
	}
}
