package ingress

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/paulmach/orb"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/geojson"
	"github.com/geodlq/geodlq/internal/jsonscan"
)

// Option defaults, used for zero fields of [Options].
const (
	// DefaultMaxBytes is the largest event accepted: 10 MiB, the payload
	// limit of Amazon API Gateway and of a Pub/Sub message. Set it to the
	// limit of the queue behind the gate (SQS: 256 KiB) when the event is
	// enqueued as is.
	DefaultMaxBytes = 10 << 20
	// DefaultMaxVertices is the most positions a geometry may have.
	DefaultMaxVertices = 1_000_000
	// DefaultMaxParts is the most rings, lines, polygons and collection
	// members a geometry may have, and DefaultMaxHoles the most holes of a
	// polygon: spatial.Checker's defaults, so that the gate refuses what
	// the consumer would.
	DefaultMaxParts = 200_000
	DefaultMaxHoles = 10_000
	// DefaultExpectedEPSG is the EPSG code events must be in: WGS 84, which
	// RFC 7946's default CRS (OGC:CRS84) resolves to.
	DefaultExpectedEPSG = 4326
	// DefaultProcessingMode is the only processing_mode accepted by
	// default: the seed's pipeline processes vector jobs.
	DefaultProcessingMode = "vector"
	// MaxSourceURILength is the longest source_uri accepted.
	MaxSourceURILength = 4096
)

// Reason kinds of the event's own members, in addition to classify's
// geometry kinds. All four are schema violations.
const (
	// KindRequired: a required member is missing or null.
	KindRequired classify.ReasonKind = "required"
	// KindWrongType: a member has the wrong JSON type.
	KindWrongType classify.ReasonKind = "wrong_type"
	// KindInvalidURI: source_uri is not an absolute URI (of an allowed
	// scheme).
	KindInvalidURI classify.ReasonKind = "invalid_uri"
	// KindUnknownMode: processing_mode is not one of the accepted modes.
	KindUnknownMode classify.ReasonKind = "unknown_processing_mode"
)

// CRSChecker checks a declared CRS against the EPSG code the pipeline
// expects. An empty declaration means RFC 7946's default, OGC:CRS84; an
// expectedEPSG of 0 or less only requires the CRS to be resolvable. A
// failure should be a *classify.Error of class crs_mismatch (kind
// crs_unparseable or crs_differs); any other error is reported as
// crs_mismatch, crs_unparseable.
//
// *spatial.Checker satisfies it (its CheckCRS resolves every EPSG code,
// in pure Go; WKT and PROJ strings with PROJ in a cgo build);
// the default, [EPSGChecker], is pure Go.
type CRSChecker interface {
	CheckCRS(declared string, expectedEPSG int) error
}

// GeometryChecker validates a GeoJSON geometry object (the bytes of the
// event's "geometry" member). A failure should be a *classify.Error whose
// geometry detail carries the reason, kind, location and fault.
//
// *spatial.Checker satisfies it: its CheckGeometry adds GEOS's topology
// checks (self-intersections, holes outside shells, …), in pure Go, which
// this package's own rules do not make. Without one, topology is the consumer's job, and a bowtie
// polygon passes the gate.
type GeometryChecker interface {
	CheckGeometry(geometry []byte) error
}

// Options configures [Validate] and [Middleware]. The zero value and nil
// use the defaults; every value is valid.
type Options struct {
	// MaxBytes is the largest event accepted, in bytes; a larger one is a
	// resource_exhausted violation (kind byte_budget), answered 413 by the
	// middleware, which stops reading at MaxBytes+1. Default
	// [DefaultMaxBytes] (10 MiB); negative means no limit.
	MaxBytes int64
	// MaxVertices is the most positions the geometry may have; the parser
	// stops at the first one over (resource_exhausted, kind vertex_budget,
	// answered 413). Default [DefaultMaxVertices]; negative means no limit.
	MaxVertices int
	// MaxParts and MaxHoles bound the rings, lines, polygons and
	// collection members of the geometry, and the holes of each polygon,
	// as spatial.Options does (resource_exhausted, kind vertex_budget,
	// answered 413). Defaults [DefaultMaxParts] and [DefaultMaxHoles];
	// negative means no limit.
	MaxParts, MaxHoles int
	// ProcessingModes are the accepted values of processing_mode, compared
	// exactly. Default ["vector"] ([DefaultProcessingMode]).
	ProcessingModes []string
	// SourceURISchemes, when set, are the accepted schemes of source_uri
	// (compared case-insensitively), such as "s3", "gs", "https". Default:
	// any scheme.
	SourceURISchemes []string
	// ExpectedEPSG is the EPSG code events must be in, passed to the
	// CRSChecker. Default [DefaultExpectedEPSG] (4326); negative: any CRS
	// the checker can resolve.
	ExpectedEPSG int
	// CRSChecker checks the declared CRS. Default [EPSGChecker]{} (pure
	// Go). Pass a *spatial.Checker for PROJ's full resolution.
	CRSChecker CRSChecker
	// GeometryChecker, when set, runs after the pure-Go checks pass, on
	// the geometry's bytes. Default none: topology is left to the consumer.
	GeometryChecker GeometryChecker
	// NoRangeCheck turns off the check that every position lies within
	// longitude [-180, 180] and latitude [-90, 90], made when the CRS is
	// WGS 84 lon/lat (absent, null, CRS84, EPSG:4326): it catches Web
	// Mercator metres labelled EPSG:4326. Default false (checked).
	NoRangeCheck bool

	// Methods are the HTTP methods the middleware validates; requests with
	// other methods pass through untouched. Default POST, PUT and PATCH.
	Methods []string
	// Instance returns the problem's "instance" member for a request.
	// Default: the request's URL path.
	Instance func(r *http.Request) string
	// ProblemTypeInvalid is the problem "type" of a 400 answer. Default
	// [ProblemTypeInvalid].
	ProblemTypeInvalid string
	// ProblemTypeTooLarge is the problem "type" of a 413 answer. Default
	// [ProblemTypeTooLarge].
	ProblemTypeTooLarge string
	// Logger receives a Debug line per rejected request. Default: discard.
	Logger *slog.Logger
}

// Violation is one reason an event is refused.
type Violation struct {
	// Pointer is an RFC 6901 JSON pointer into the event, in its string
	// form: "/source_uri", "/geometry/coordinates/0/4" (the offending
	// position), "" for the whole event.
	Pointer string `json:"pointer"`
	// Class is the failure class the event would have been dead-lettered
	// with: schema_violation, invalid_geometry, crs_mismatch or
	// resource_exhausted.
	Class classify.Class `json:"class"`
	// Kind is a bounded label: classify's reason kinds, or [KindRequired],
	// [KindWrongType], [KindInvalidURI], [KindUnknownMode].
	Kind classify.ReasonKind `json:"kind"`
	// Message says what is wrong, for a person; for geometry faults it is
	// the validity reason ("Ring is not closed[10 10]").
	Message string `json:"message"`
	// Location is the offending point, when known.
	Location *orb.Point `json:"location,omitempty"`
	// Fault is the offending position's part, ring and vertex index (as in
	// the dlq.v1 envelope), when known.
	Fault *classify.Fault `json:"fault,omitempty"`
	// EPSG is the EPSG code involved in a crs_mismatch, when known.
	EPSG int `json:"epsg,omitempty"`
}

// String returns "pointer: class/kind: message".
func (v Violation) String() string {
	return fmt.Sprintf("%s: %s/%s: %s", v.Pointer, v.Class, v.Kind, v.Message)
}

// config is Options with defaults applied.
type config struct {
	Options
	methods map[string]bool
}

func newConfig(opts *Options) *config {
	c := &config{}
	if opts != nil {
		c.Options = *opts
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.MaxVertices == 0 {
		c.MaxVertices = DefaultMaxVertices
	}
	if c.MaxParts == 0 {
		c.MaxParts = DefaultMaxParts
	}
	if c.MaxHoles == 0 {
		c.MaxHoles = DefaultMaxHoles
	}
	if len(c.ProcessingModes) == 0 {
		c.ProcessingModes = []string{DefaultProcessingMode}
	}
	if c.ExpectedEPSG == 0 {
		c.ExpectedEPSG = DefaultExpectedEPSG
	}
	if c.CRSChecker == nil {
		c.CRSChecker = EPSGChecker{}
	}
	if len(c.Methods) == 0 {
		c.Methods = []string{http.MethodPost, http.MethodPut, http.MethodPatch}
	}
	c.methods = make(map[string]bool, len(c.Methods))
	for _, m := range c.Methods {
		c.methods[strings.ToUpper(m)] = true
	}
	if c.Instance == nil {
		c.Instance = func(r *http.Request) string { return r.URL.Path }
	}
	if c.ProblemTypeInvalid == "" {
		c.ProblemTypeInvalid = ProblemTypeInvalid
	}
	if c.ProblemTypeTooLarge == "" {
		c.ProblemTypeTooLarge = ProblemTypeTooLarge
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// The event's members the gate reads, indexed by the f* constants.
var fieldPaths = []jsonscan.Path{
	jsonscan.MustCompile("/source_uri"),
	jsonscan.MustCompile("/processing_mode"),
	jsonscan.MustCompile("/crs"),
	jsonscan.MustCompile("/geometry"),
}

const (
	fSourceURI = iota
	fMode
	fCRS
	fGeometry
	fieldCount
)

// Validate checks an event before it is enqueued and returns every
// violation found, or nil when the event passes. It never modifies
// payload and never panics.
//
// The event must be a JSON object with
//
//   - source_uri: required, a string holding an absolute URI (scheme ":"
//     and something after it, no spaces or control characters, at most
//     4096 bytes), of one of Options.SourceURISchemes when set;
//   - processing_mode: required, a string, one of Options.ProcessingModes
//     (default "vector");
//   - crs: optional; a string, a GeoJSON 2008 named CRS object, an integer
//     EPSG code or null (absent and null mean RFC 7946's OGC:CRS84),
//     checked by Options.CRSChecker against Options.ExpectedEPSG; a
//     geometry's own (2008) crs member counts when the event has none;
//   - geometry: required, a GeoJSON geometry object with "type" and
//     "coordinates" ("geometries" for a GeometryCollection).
//
// The geometry rules are those of package spatial, shared through
// internal/geojson: the same parser (structure, nesting for the type,
// numeric positions of two or more ordinates, the vertex budget; bare
// NaN/Infinity tokens are read so that they can be reported at their
// vertex), then the same checks — finite coordinates, rings closed and of
// at least four positions, lines of at least two, not empty — and, in a
// WGS 84 lon/lat CRS, coordinate ranges. Topology (self-intersection and
// the other faults only GEOS sees) is checked only by a
// GeometryChecker.
//
// Member checks are independent: a bad source_uri and a bad geometry are
// two violations, listed in the order source_uri, processing_mode, crs,
// geometry. The geometry check stops at its first fault, as the
// consumer's would. A payload over MaxBytes, or one that is not a JSON
// object, yields that single violation.
func Validate(payload []byte, opts *Options) []Violation {
	return newConfig(opts).validate(payload)
}

func (c *config) validate(payload []byte) []Violation {
	if c.MaxBytes >= 0 && int64(len(payload)) > c.MaxBytes {
		return []Violation{tooLarge(int64(len(payload)), c.MaxBytes)}
	}
	if i := skipWS(payload, 0); i >= len(payload) || payload[i] != '{' {
		msg := "the event is not a JSON object"
		if i >= len(payload) {
			msg += " (empty body)"
		}
		return []Violation{{Class: classify.ClassSchemaViolation, Kind: classify.KindMalformed, Message: msg}}
	}
	var spans [fieldCount]jsonscan.Span
	if err := jsonscan.FindAll(payload, fieldPaths, spans[:]); err != nil {
		off := 0
		var se *jsonscan.SyntaxError
		if errors.As(err, &se) {
			off = se.Offset
		}
		return []Violation{{Pointer: pointerAt(payload, off), Class: classify.ClassSchemaViolation, Kind: classify.KindMalformed,
			Message: fmt.Sprintf("the event is not valid JSON: %s", strings.TrimPrefix(err.Error(), "jsonscan: "))}}
	}
	var vs []Violation
	if v, ok := c.checkSourceURI(payload, spans[fSourceURI]); !ok {
		vs = append(vs, v)
	}
	if v, ok := c.checkMode(payload, spans[fMode]); !ok {
		vs = append(vs, v)
	}
	return append(vs, c.checkGeometryAndCRS(payload, spans[fCRS], spans[fGeometry])...)
}

func tooLarge(size, limit int64) Violation {
	return Violation{Class: classify.ClassResourceExhausted, Kind: classify.KindByteBudget,
		Message: fmt.Sprintf("the event is %d bytes, over the budget of %d bytes", size, limit)}
}

func quoteShort(s string) string {
	if len(s) > 100 {
		s = s[:100] + "…"
	}
	return strconv.Quote(s)
}

// stringMember reads a required string member.
func stringMember(payload []byte, sp jsonscan.Span, name string) (string, *Violation) {
	ptr := "/" + name
	if !sp.Found() || string(payload[sp.Start:sp.End]) == "null" {
		return "", &Violation{Pointer: ptr, Class: classify.ClassSchemaViolation, Kind: KindRequired, Message: name + " is required"}
	}
	if payload[sp.Start] != '"' {
		return "", &Violation{Pointer: ptr, Class: classify.ClassSchemaViolation, Kind: KindWrongType, Message: name + " must be a string"}
	}
	s, err := jsonscan.Unquote(payload[sp.Start:sp.End])
	if err != nil {
		return "", &Violation{Pointer: ptr, Class: classify.ClassSchemaViolation, Kind: classify.KindMalformed, Message: name + ": " + err.Error()}
	}
	return s, nil
}

func (c *config) checkSourceURI(payload []byte, sp jsonscan.Span) (Violation, bool) {
	s, v := stringMember(payload, sp, "source_uri")
	if v != nil {
		return *v, false
	}
	bad := func(why string) (Violation, bool) {
		return Violation{Pointer: "/source_uri", Class: classify.ClassSchemaViolation, Kind: KindInvalidURI,
			Message: "source_uri " + quoteShort(s) + " is not " + why}, false
	}
	if len(s) > MaxSourceURILength {
		return bad(fmt.Sprintf("a URI of at most %d bytes", MaxSourceURILength))
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] == 0x7f {
			return bad("an absolute URI: it contains a space or control character")
		}
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" || u.Host == "" && u.Opaque == "" && strings.Trim(u.Path, "/") == "" {
		return bad("an absolute URI (scheme:location, such as s3://bucket/key.geojson)")
	}
	if len(c.SourceURISchemes) > 0 && !slices.ContainsFunc(c.SourceURISchemes, func(sc string) bool { return strings.EqualFold(sc, u.Scheme) }) {
		return bad("of an accepted scheme (" + strings.Join(c.SourceURISchemes, ", ") + ")")
	}
	return Violation{}, true
}

func (c *config) checkMode(payload []byte, sp jsonscan.Span) (Violation, bool) {
	s, v := stringMember(payload, sp, "processing_mode")
	if v != nil {
		return *v, false
	}
	if slices.Contains(c.ProcessingModes, s) {
		return Violation{}, true
	}
	return Violation{Pointer: "/processing_mode", Class: classify.ClassSchemaViolation, Kind: KindUnknownMode,
		Message: "processing_mode " + quoteShort(s) + " is not one of: " + strings.Join(c.ProcessingModes, ", ")}, false
}

// parseViolation turns a geojson parse error into a violation.
func parseViolation(payload []byte, err error, geomSpan jsonscan.Span) Violation {
	v := Violation{Class: classify.ClassSchemaViolation, Kind: classify.KindMalformed, Message: err.Error()}
	var ge *geojson.Error
	if !errors.As(err, &ge) {
		return v
	}
	v.Kind, v.Message = ge.Kind, ge.Msg
	switch {
	case ge.Kind == classify.KindVertexBudget:
		v.Class = classify.ClassResourceExhausted
	case ge.Kind == classify.KindMalformed:
		v.Message = fmt.Sprintf("%s (byte %d)", ge.Msg, ge.Offset)
	}
	if ge.Kind == classify.KindMissingGeometry && !geomSpan.Found() {
		v.Pointer = "/geometry"
	} else {
		v.Pointer = pointerAt(payload, ge.Offset)
	}
	return v
}

// classified turns a checker's error into a violation; fault positions
// are placed in the geometry at geomStart when g is known.
func classified(err error, def classify.Class, defKind classify.ReasonKind, ptr string, payload []byte, geomStart int, g orb.Geometry) Violation {
	v := Violation{Pointer: ptr, Class: def, Kind: defKind, Message: err.Error()}
	var ce *classify.Error
	if errors.As(err, &ce) && ce.Class.Valid() {
		v.Class = ce.Class
	}
	if d := classify.DetailOf(err); d != nil {
		if d.Kind != "" {
			v.Kind = d.Kind
		}
		if d.Reason != "" {
			v.Message = d.Reason
		}
		if d.Location != nil && !math.IsNaN(d.Location[0]+d.Location[1]) && !math.IsInf(d.Location[0]+d.Location[1], 0) {
			loc := *d.Location
			v.Location = &loc
		}
		if d.Fault != nil {
			f := *d.Fault
			v.Fault = &f
			v.Pointer = faultPointer(payload, geomStart, ptr, g, &f)
		}
		v.EPSG = d.EPSG
	}
	return v
}

func (c *config) checkGeometryAndCRS(payload []byte, crsSpan, geomSpan jsonscan.Span) []Violation {
	ev, err := geojson.ParseEvent(payload, geojson.Limits{MaxVertices: c.MaxVertices, MaxParts: c.MaxParts, MaxHoles: c.MaxHoles})
	if err != nil {
		pv := parseViolation(payload, err, geomSpan)
		var vs []Violation
		// The geometry could not be read; the crs member still can, unless
		// it is what failed.
		if crsSpan.Found() && !strings.HasPrefix(pv.Pointer+"/", "/crs/") {
			if crs, cerr := parseCRSMember(payload[crsSpan.Start:crsSpan.End]); cerr == nil {
				if v, ok := c.checkCRS(crs, "/crs"); !ok {
					vs = append(vs, v)
				}
			}
		}
		return append(vs, pv)
	}
	var vs []Violation
	crsPtr := "/crs"
	if !crsSpan.Found() && ev.CRS.Form != geojson.CRSAbsent {
		crsPtr = "/geometry/crs"
	}
	crsOK := true
	if v, ok := c.checkCRS(ev.CRS, crsPtr); !ok {
		vs = append(vs, v)
		crsOK = false
	}
	g := ev.Geometry
	if crsOK && !c.NoRangeCheck && isWGS84LonLat(ev.CRS) {
		if err := geojson.CheckRange(g); err != nil {
			vs = append(vs, classified(err, classify.ClassCRSMismatch, classify.KindOutOfRange, "/geometry", payload, geomSpan.Start, g.Geom))
		}
	}
	if err := geojson.Validate(g); err != nil {
		return append(vs, classified(err, classify.ClassInvalidGeometry, classify.KindOther, "/geometry", payload, geomSpan.Start, g.Geom))
	}
	if c.GeometryChecker != nil && len(vs) == 0 {
		if err := c.GeometryChecker.CheckGeometry(payload[geomSpan.Start:geomSpan.End]); err != nil {
			vs = append(vs, classified(err, classify.ClassInvalidGeometry, classify.KindOther, "/geometry", payload, geomSpan.Start, g.Geom))
		}
	}
	return vs
}

// parseCRSMember reads a crs member's value with the shared parser, by
// parsing it as the crs of a minimal event.
func parseCRSMember(value []byte) (geojson.CRS, error) {
	const head, tail = `{"crs":`, `,"geometry":{"type":"Point","coordinates":[0,0]}}`
	doc := make([]byte, 0, len(head)+len(value)+len(tail))
	doc = append(append(append(doc, head...), value...), tail...)
	ev, err := geojson.ParseEvent(doc, geojson.Limits{})
	return ev.CRS, err
}

func (c *config) checkCRS(crs geojson.CRS, ptr string) (Violation, bool) {
	if crs.Form == geojson.CRSLinked {
		return Violation{Pointer: ptr, Class: classify.ClassCRSMismatch, Kind: classify.KindCRSUnparseable,
			Message: "linked CRS objects (GeoJSON 2008) cannot be resolved: " + quoteShort(crs.Name)}, false
	}
	if err := c.CRSChecker.CheckCRS(crs.Name, c.ExpectedEPSG); err != nil {
		return classified(err, classify.ClassCRSMismatch, classify.KindCRSUnparseable, ptr, nil, -1, nil), false
	}
	return Violation{}, true
}

// isWGS84LonLat reports whether coordinates in crs are WGS 84 longitude
// and latitude: no CRS (RFC 7946's default), CRS84 or EPSG:4326.
func isWGS84LonLat(crs geojson.CRS) bool {
	if strings.TrimSpace(crs.Name) == "" {
		return crs.Form != geojson.CRSLinked
	}
	code, err := envelope.ParseEPSG(crs.Name)
	return err == nil && code == 4326
}

// EPSGChecker is the pure-Go [CRSChecker], built on envelope.ParseEPSG:
// it knows EPSG:n, urn:ogc:def:crs:EPSG::n, the opengis.net EPSG URLs and
// the CRS84 forms, without a CRS database.
//
// A CRS it recognises must resolve to the expected code (crs_differs,
// with the code). One that looks like an EPSG or OGC identifier but does
// not parse ("EPSG:43x6") is crs_unparseable. Any other form (WKT, a PROJ
// string, another authority) cannot be judged without PROJ: it passes,
// and the consumer's PROJ decides, unless Strict is set.
type EPSGChecker struct {
	// Strict refuses, as crs_unparseable, every CRS ParseEPSG does not
	// recognise.
	Strict bool
}

// CheckCRS implements [CRSChecker].
func (e EPSGChecker) CheckCRS(declared string, expectedEPSG int) error {
	def := strings.TrimSpace(declared)
	if def == "" {
		def = "OGC:CRS84"
	}
	code, err := envelope.ParseEPSG(def)
	if err != nil {
		if !e.Strict && !looksLikeIdentifier(def) {
			return nil
		}
		reason := fmt.Sprintf("unparseable CRS %s: not an EPSG code or CRS84 identifier", quoteShort(declared))
		return &classify.Error{Class: classify.ClassCRSMismatch, Stage: classify.StageCRSTransform,
			Geometry: &classify.GeometryDetail{Reason: reason, Kind: classify.KindCRSUnparseable},
			Err:      errors.New("ingress: " + reason)}
	}
	if expectedEPSG > 0 && code != expectedEPSG {
		reason := fmt.Sprintf("payload CRS is EPSG:%d but pipeline expects EPSG:%d", code, expectedEPSG)
		return &classify.Error{Class: classify.ClassCRSMismatch, Stage: classify.StageCRSTransform,
			Geometry: &classify.GeometryDetail{Reason: reason, Kind: classify.KindCRSDiffers, EPSG: code},
			Err:      errors.New("ingress: " + reason)}
	}
	return nil
}

// looksLikeIdentifier reports whether s has the form of an identifier
// ParseEPSG is the authority on: EPSG:…, an OGC URN or opengis.net URL,
// or a CRS84 name.
func looksLikeIdentifier(s string) bool {
	l := strings.ToLower(s)
	for _, p := range []string{"epsg:", "urn:ogc:def:crs:", "http://www.opengis.net/def/crs/", "https://www.opengis.net/def/crs/", "ogc:", "crs84"} {
		if strings.HasPrefix(l, p) {
			return true
		}
	}
	return false
}
