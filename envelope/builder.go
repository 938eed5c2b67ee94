package envelope

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/internal/idemkey"
	"github.com/geodlq/geodlq/internal/jsonscan"
	"github.com/geodlq/geodlq/offload"
)

// DefaultGeometryPath is where [Builder] looks for the geometry by default.
const DefaultGeometryPath = "/geometry"

// DefaultIdempotencyKeyPath is where [Builder] looks for the event's own
// idempotency key by default: a top-level idempotency_key member.
const DefaultIdempotencyKeyPath = "/idempotency_key"

// MissingGeometry is the inline placeholder recorded when a payload has no
// geometry (absent, null, or the payload is not JSON).
const MissingGeometry = `{"type":"GeometryCollection","geometries":[]}`

// Namespaces used with idemkey.Derive, fixed so that other implementations
// derive the same values.
const (
	// PayloadKeyNamespace derives a missing idempotency key:
	// idemkey.Derive(PayloadKeyNamespace, sha256(payload)) — the key
	// depends only on the payload bytes.
	PayloadKeyNamespace = "geodlq/payload-sha256"
	// EventIDNamespace derives a missing event id from the idempotency
	// key: "evt-" + the first 32 hex digits of
	// idemkey.Derive(EventIDNamespace, []byte(key)).
	EventIDNamespace = "geodlq/event-id"
)

// truncationMarker ends an error message cut to fit the size limit.
const truncationMarker = "…[truncated by geodlq: %d bytes dropped]"

// parallelHashMin is the payload size from which Build, when more than one
// core is available, hashes the whole payload on a second goroutine, and
// the geometry on a third, while it scans the payload (see speculate).
const parallelHashMin = 1 << 20

// BuilderOptions configures a [Builder]. The zero value (and nil) uses the
// defaults.
type BuilderOptions struct {
	// Offloader stores geometries larger than its threshold (and, when the
	// envelope exceeds Input.MaxBytes, smaller geometries and then the
	// whole payload). nil: never offload; everything is inline.
	Offloader *offload.Offloader
	// GeometryPath locates the geometry in the payload, as a JSON pointer
	// ("/geometry", "/feature/geometry", "/features/0/geometry"). Default
	// [DefaultGeometryPath].
	GeometryPath string
	// IdempotencyKeyPath locates the event's own idempotency key in the
	// payload, as a JSON pointer ("/idempotency_key",
	// "/properties/idempotency_key"): the key the producer assigned at
	// ingestion, which Build records verbatim when the caller gives none
	// (see [Input].IdempotencyKey and [Builder.IdempotencyKeyOf]). Default
	// [DefaultIdempotencyKeyPath].
	IdempotencyKeyPath string
	// ResolveEPSG maps the payload's CRS string to an EPSG code for
	// source_epsg (and for a crs_mismatch whose error has no code). Its
	// errors are not fatal: the code is then 0. Default [ParseEPSG]: pure
	// Go, EPSG:n, urn:ogc:def:crs:EPSG::n, OGC URLs and the CRS84 forms.
	ResolveEPSG func(crs string) (int, error)
	// Now returns the current time, for dead_lettered_at and a missing
	// first_seen_at. Default [time.Now]. Times are recorded in UTC.
	Now func() time.Time
	// Classifier classifies Input.Err when Input.Class is zero. Default:
	// the default rules ([classify.Classify]).
	Classifier *classify.Classifier
	// DefaultStage is the stage recorded when neither the error nor
	// Input.Stage names one. Default [classify.StageSpatialJoin], as in the
	// reference design.
	DefaultStage classify.Stage
}

// Input is one failed event to wrap.
type Input struct {
	// Payload is the event exactly as the consumer received it. It need not
	// be JSON. Build does not modify it, and the returned envelope may
	// share its memory (RawPayload, Geometry.Inline), so do not modify it
	// while the envelope is in use.
	Payload []byte
	// IdempotencyKey is the key assigned at ingestion (an idempotency-key
	// header), preserved verbatim; it wins over the payload's own key.
	// Empty: the payload's own key ([Builder.IdempotencyKeyOf]) when it
	// has one, else a key derived from the payload (see
	// PayloadKeyNamespace), and the envelope is then marked
	// idempotency_key_derived.
	IdempotencyKey string
	// IdempotencyKeyDerived says that IdempotencyKey was not assigned at
	// ingestion but derived by the caller (broker.Processor derives one
	// from the message's source and body when the message carries none):
	// the envelope is marked idempotency_key_derived. Ignored when
	// IdempotencyKey is empty.
	IdempotencyKeyDerived bool
	// EventID overrides the event id. Empty: the payload's event_id member,
	// else its id member (string or number), else one derived from the
	// idempotency key (see EventIDNamespace).
	EventID string
	// Err is the failure. It may be nil (class unknown, empty message).
	Err error
	// Stage is the stage that was running, used when Err names none.
	Stage classify.Stage
	// Class overrides the classification of Err when non-zero.
	Class classify.Class
	// Attempts is how many times the event was tried; values below 1
	// become 1.
	Attempts int
	// FirstSeenAt is when the event was first received; zero becomes now.
	FirstSeenAt time.Time
	// Source is the broker provenance, if known.
	Source *Source
	// TraceID correlates the event with traces, if known.
	TraceID string
	// MaxBytes is the destination's message limit for the encoded
	// envelope; 0 means none. See [Builder.Build] for how an envelope is
	// made to fit.
	MaxBytes int
}

// Builder turns failed events into dead-letter envelopes. It is immutable
// after [NewBuilder] and safe for concurrent use.
type Builder struct {
	off          *offload.Offloader
	paths        []jsonscan.Path
	keyPath      jsonscan.Path
	resolve      func(string) (int, error)
	now          func() time.Time
	classifier   *classify.Classifier
	defaultStage classify.Stage
	// geomMembers is GeometryPath as member names, for the speculative
	// hash of a large geometry (see speculate); nil when the path has an
	// array index.
	geomMembers []string
}

// Indexes into Builder.paths.
const (
	pathGeometry = iota
	pathGeometryType
	pathEventID
	pathID
	pathCRS
	pathCRSName
	pathIdempotencyKey
	numPaths
)

// NewBuilder returns a Builder. nil opts means the defaults.
func NewBuilder(opts *BuilderOptions) (*Builder, error) {
	var o BuilderOptions
	if opts != nil {
		o = *opts
	}
	if o.GeometryPath == "" {
		o.GeometryPath = DefaultGeometryPath
	}
	geom, err := jsonscan.Compile(o.GeometryPath)
	if err != nil {
		return nil, fmt.Errorf("envelope: GeometryPath: %w", err)
	}
	if o.GeometryPath == "" || o.GeometryPath[0] != '/' {
		return nil, fmt.Errorf("envelope: GeometryPath %q must name a member", o.GeometryPath)
	}
	if o.IdempotencyKeyPath == "" {
		o.IdempotencyKeyPath = DefaultIdempotencyKeyPath
	}
	keyPath, err := jsonscan.Compile(o.IdempotencyKeyPath)
	if err != nil || o.IdempotencyKeyPath[0] != '/' {
		return nil, fmt.Errorf("envelope: IdempotencyKeyPath %q must name a member: %w", o.IdempotencyKeyPath, errors.Join(err, jsonscan.ErrBadPath))
	}
	if o.DefaultStage == "" {
		o.DefaultStage = classify.StageSpatialJoin
	}
	if !o.DefaultStage.Valid() {
		return nil, fmt.Errorf("envelope: DefaultStage %v is not a stage", o.DefaultStage)
	}
	if o.ResolveEPSG == nil {
		o.ResolveEPSG = ParseEPSG
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	paths := make([]jsonscan.Path, numPaths)
	paths[pathGeometry] = geom
	paths[pathIdempotencyKey] = keyPath
	for i, p := range map[int]string{
		pathGeometryType: o.GeometryPath + "/type",
		pathEventID:      "/event_id",
		pathID:           "/id",
		pathCRS:          "/crs",
		pathCRSName:      "/crs/properties/name",
	} {
		paths[i] = jsonscan.MustCompile(p)
	}
	return &Builder{
		off:          o.Offloader,
		paths:        paths,
		keyPath:      keyPath,
		resolve:      o.ResolveEPSG,
		now:          o.Now,
		classifier:   o.Classifier,
		defaultStage: o.DefaultStage,
		geomMembers:  memberTokens(o.GeometryPath),
	}, nil
}

// Build wraps a failed event and returns the envelope and its encoding.
// Whatever the payload — not JSON, empty, without geometry, with crs: null,
// with NaN tokens — Build produces an envelope; it fails only when storage
// fails (an offload the envelope needs), when the caller's own fields
// (Source, TraceID) break the format, or when the envelope cannot be made
// to fit MaxBytes.
//
// The envelope's fields come from:
//   - failure_class: Input.Class, else the Classifier on Input.Err
//     (unknown when nil); destination: [classify.RouteFor] the class;
//   - failed_stage: [classify.StageOf] Input.Err, else Input.Stage, else
//     DefaultStage;
//   - geometry_error: [classify.DetailOf] Input.Err (reason, kind,
//     location, epsg, fault); for invalid_geometry and crs_mismatch
//     without detail, the error message. A crs_mismatch always has epsg,
//     0 when unknown;
//   - geometry_type and vertex_count: the detail, else a scan of the
//     geometry ("type" member, count of positions);
//   - event_id, source_crs, source_epsg: see [Input] and
//     [BuilderOptions].
//
// The geometry is the value at GeometryPath, byte for byte. It is inline
// when it is no larger than the Offloader's threshold (or there is no
// Offloader); otherwise it is stored with ext "geojson" and the persisted
// raw payload has its value replaced by {"$ref":"<offload_uri>"}. A
// missing (or null) geometry is recorded as the [MissingGeometry]
// placeholder with missing: true and payload_offset -1.
//
// When MaxBytes > 0 and the encoding is larger, Build in turn: offloads the
// geometry even under the threshold; offloads the whole raw payload (ext
// "json"); truncates error_message (and geometry_error.reason) with a
// visible marker. If the envelope still does not fit, it returns the
// smallest envelope it made, no encoding, and a [*classify.TooLargeError].
func (b *Builder) Build(ctx context.Context, in Input) (*Envelope, []byte, error) {
	payload := in.Payload
	var payloadSum [sha256.Size]byte
	var wg sync.WaitGroup
	switch {
	case len(payload) < parallelHashMin:
		payloadSum = sha256.Sum256(payload)
	case runtime.GOMAXPROCS(0) > 1:
		wg.Go(func() { payloadSum = sha256Chunked(payload) })
	default: // one core: no goroutine to pay for
		payloadSum = sha256Chunked(payload)
	}
	spec := b.speculate(payload)
	e, err := b.build(ctx, in, &payloadSum, &wg, spec)
	spec.cancel() // unless it was finished
	wg.Wait()
	if err != nil {
		return nil, nil, err
	}
	return b.fit(ctx, e, in)
}

// build fills the envelope. It must call wg.Wait before reading
// *payloadSum.
func (b *Builder) build(ctx context.Context, in Input, payloadSum *[sha256.Size]byte, wg *sync.WaitGroup, spec *speculation) (*Envelope, error) {
	payload := in.Payload
	now := b.now().UTC().Round(0)
	class := in.Class
	if !class.Valid() {
		class = b.classifier.Classify(in.Err)
		if !class.Valid() {
			class = classify.ClassUnknown
		}
	}
	stage := classify.StageOf(in.Err)
	if !stage.Valid() {
		stage = in.Stage
	}
	if !stage.Valid() {
		stage = b.defaultStage
	}
	first := in.FirstSeenAt.UTC().Round(0)
	if first.Year() < 2 || first.Year() > 9999 { // year 1: Go's zero time, unset on the wire
		first = now
	}
	e := &Envelope{
		SchemaVersion:  SchemaVersion,
		FailureClass:   class,
		FailedStage:    stage,
		Route:          classify.RouteFor(class),
		Attempts:       max(in.Attempts, 1),
		FirstSeenAt:    first,
		DeadLetteredAt: now,
		Source:         in.Source,
		TraceID:        in.TraceID,
		PayloadSize:    int64(len(payload)),
	}
	if in.Err != nil {
		e.ErrorMessage = in.Err.Error()
	}

	// One pass over the payload finds everything we read from it.
	var sp [numPaths]jsonscan.Span
	vertices, err := jsonscan.FindAllCount(payload, b.paths, sp[:], pathGeometry)
	if err != nil {
		vertices = 0
		for i := range sp {
			sp[i] = jsonscan.Span{Start: -1, End: -1}
		}
	}
	value := func(i int) []byte {
		if !sp[i].Found() {
			return nil
		}
		return payload[sp[i].Start:sp[i].End]
	}

	// CRS.
	crs := value(pathCRS)
	if len(crs) > 0 && crs[0] == '{' {
		crs = value(pathCRSName)
	}
	if s, ok := stringValue(crs, 4096); ok {
		e.SourceCRS = s
		if code, err := b.resolve(s); err == nil && code > 0 {
			e.SourceEPSG = code
		}
	}

	// Geometry detail.
	detail := classify.DetailOf(in.Err)
	if detail != nil {
		ge := &GeometryError{Reason: detail.Reason, Kind: string(detail.Kind), Fault: detail.Fault}
		if ge.Kind == "" {
			ge.Kind = string(classify.KindOfReason(detail.Reason))
		}
		if len(ge.Kind) > maxLabelLen {
			ge.Kind = string(classify.KindOther)
		}
		if p := detail.Location; p != nil && finite(p[0]) && finite(p[1]) {
			ge.Location = []float64{p[0], p[1]}
		}
		if detail.EPSG != 0 || class == classify.ClassCRSMismatch {
			epsg := max(detail.EPSG, 0)
			ge.EPSG = &epsg
		}
		e.GeometryError = ge
		if len(detail.GeometryType) <= maxLabelLen {
			e.GeometryType = detail.GeometryType
		}
		e.VertexCount = max(detail.VertexCount, 0)
	}
	switch class {
	case classify.ClassInvalidGeometry, classify.ClassCRSMismatch:
		if e.GeometryError == nil {
			e.GeometryError = &GeometryError{Reason: e.ErrorMessage, Kind: string(classify.KindOfReason(e.ErrorMessage))}
		}
		if class == classify.ClassCRSMismatch {
			if e.GeometryError.EPSG == nil || *e.GeometryError.EPSG == 0 {
				epsg := e.SourceEPSG
				e.GeometryError.EPSG = &epsg
			}
		}
	}

	// Geometry.
	geom := value(pathGeometry)
	if len(geom) == 0 || geom[0] == 'n' { // absent or null
		geom = nil
	}
	if geom == nil {
		e.Geometry = GeometryRef{Inline: []byte(MissingGeometry), InlineEncoding: EncodingJSON, ByteSize: int64(len(MissingGeometry)),
			ContentSHA256: missingSHA256, PayloadOffset: -1, Missing: true}
		e.RawPayload = payload
	} else {
		if e.GeometryType == "" {
			if s, ok := stringValue(value(pathGeometryType), maxLabelLen); ok {
				e.GeometryType = s
			}
		}
		if e.VertexCount == 0 {
			e.VertexCount = vertices // counted by the scan that located it
		}
		e.Geometry = GeometryRef{Inline: geom, ByteSize: int64(len(geom)), PayloadOffset: int64(sp[pathGeometry].Start)}
		e.RawPayload = payload
		if b.off != nil && len(geom) > b.off.Threshold() {
			if err := b.offloadGeometry(ctx, e, payload, spec.take(e.Geometry.PayloadOffset)); err != nil {
				return nil, err
			}
		} else {
			sum := sha256.Sum256(geom)
			e.Geometry.ContentSHA256 = hex.EncodeToString(sum[:])
			e.RawPayloadEncoding = ChooseEncoding(payload)
			// A value located in a valid JSON document is itself valid
			// JSON, in valid UTF-8, without surrounding whitespace.
			e.Geometry.InlineEncoding = EncodingJSON
			if e.RawPayloadEncoding != EncodingJSON {
				e.Geometry.InlineEncoding = ChooseEncoding(geom)
			}
		}
	}
	if e.RawPayloadEncoding == "" {
		e.RawPayloadEncoding = ChooseEncoding(e.RawPayload)
	}

	// Identity: needs the payload hash.
	wg.Wait()
	e.PayloadSHA256 = hex.EncodeToString(payloadSum[:])
	e.IdempotencyKey, e.IdempotencyKeyDerived = in.IdempotencyKey, in.IdempotencyKeyDerived
	if e.IdempotencyKey == "" {
		e.IdempotencyKey, e.IdempotencyKeyDerived = payloadKey(value(pathIdempotencyKey)), false
	}
	if e.IdempotencyKey == "" {
		e.IdempotencyKey = idemkey.Derive(PayloadKeyNamespace, payloadSum[:])
		e.IdempotencyKeyDerived = true
	}
	e.EventID = in.EventID
	if e.EventID == "" {
		e.EventID = eventID(value(pathEventID))
	}
	if e.EventID == "" {
		e.EventID = eventID(value(pathID))
	}
	if e.EventID == "" {
		e.EventID = "evt-" + idemkey.Derive(EventIDNamespace, []byte(e.IdempotencyKey))[len(idemkey.Prefix):][:32]
	}
	return e, nil
}

var missingSHA256 = func() string {
	s := sha256.Sum256([]byte(MissingGeometry))
	return hex.EncodeToString(s[:])
}()

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// stringValue decodes a JSON string value of at most limit bytes.
func stringValue(v []byte, limit int) (string, bool) {
	if len(v) < 2 || v[0] != '"' || len(v) > 6*limit+2 {
		return "", false
	}
	s, err := jsonscan.Unquote(v)
	if err != nil || s == "" || len(s) > limit {
		return "", false
	}
	return s, true
}

// IdempotencyKeyOf returns the event's own idempotency key: the value at
// the Builder's IdempotencyKeyPath in payload when it is a non-empty
// string (decoded as encoding/json decodes it) or a number (as written),
// of at most 65,536 bytes, in a JSON document ([Build] reads the same
// value when the caller gives no key). It returns "" when the payload has
// none, or is not JSON. It allocates only the key.
func (b *Builder) IdempotencyKeyOf(payload []byte) string {
	var sp [1]jsonscan.Span
	if jsonscan.FindAll(payload, []jsonscan.Path{b.keyPath}, sp[:]) != nil || !sp[0].Found() {
		return ""
	}
	return payloadKey(payload[sp[0].Start:sp[0].End])
}

// payloadKey reads an idempotency key member: a non-empty string, or a
// number (recorded as written), that fits the envelope.
func payloadKey(v []byte) string {
	if len(v) == 0 {
		return ""
	}
	if c := v[0]; c == '-' || c >= '0' && c <= '9' {
		if len(v) > maxKeyLen || !isNumber(v) {
			return ""
		}
		return string(v)
	}
	s, _ := stringValue(v, maxKeyLen)
	return s
}

// eventID reads an event id member: a non-empty string, or a number
// (recorded as written).
func eventID(v []byte) string {
	if len(v) == 0 {
		return ""
	}
	if c := v[0]; c == '-' || c >= '0' && c <= '9' {
		if len(v) > maxEventIDLen || !isNumber(v) {
			return ""
		}
		return string(v)
	}
	s, _ := stringValue(v, maxEventIDLen)
	return s
}

// isNumber reports whether v, located as a value by the scanner, is a
// JSON number: the scanner also accepts -Infinity there, and a JSON
// number ends with a digit.
func isNumber(v []byte) bool {
	if c := v[len(v)-1]; c < '0' || c > '9' {
		return false
	}
	_, err := strconv.ParseFloat(string(v), 64)
	return err == nil || errors.Is(err, strconv.ErrRange)
}

// offloadGeometry stores the inline geometry of e (located in payload)
// and replaces it by a $ref in the persisted raw payload. sp, when not
// nil, is the speculative put of the geometry, hashed while it was
// located.
func (b *Builder) offloadGeometry(ctx context.Context, e *Envelope, payload []byte, sp *offload.SpanPut) error {
	g := &e.Geometry
	var ref offload.Ref
	var err error
	if sp != nil {
		ref, err = sp.Finish(ctx, int(g.PayloadOffset)+len(g.Inline))
	} else {
		ref, err = b.off.Put(ctx, g.Inline, offload.ExtGeoJSON)
	}
	if err != nil {
		return fmt.Errorf("envelope: offload geometry: %w", err)
	}
	start := int(g.PayloadOffset)
	end := start + len(g.Inline)
	persisted := make([]byte, 0, len(payload)-len(g.Inline)+len(ref.URI)+12)
	persisted = append(persisted, payload[:start]...)
	persisted = appendRef(persisted, ref.URI)
	persisted = append(persisted, payload[end:]...)
	g.Inline, g.InlineEncoding = nil, ""
	g.OffloadURI, g.ContentSHA256 = ref.URI, ref.SHA256
	e.RawPayload, e.RawPayloadEncoding = persisted, ChooseEncoding(persisted)
	return nil
}

// appendRef appends the exact bytes that replace an offloaded geometry:
// {"$ref":"<uri>"}. Offload URIs need no escaping.
func appendRef(dst []byte, uri string) []byte {
	dst = append(dst, `{"$ref":"`...)
	dst = append(dst, uri...)
	return append(dst, `"}`...)
}

// fit validates and encodes e, shrinking it to in.MaxBytes if needed.
func (b *Builder) fit(ctx context.Context, e *Envelope, in Input) (*Envelope, []byte, error) {
	if err := checkCallerFields(&in); err != nil {
		return nil, nil, err
	}
	data, err := e.encodeTrusted()
	if err != nil {
		return nil, nil, fmt.Errorf("envelope: build: %w", err)
	}
	limit := in.MaxBytes
	if limit <= 0 || len(data) <= limit {
		return e, data, nil
	}
	// 1. Offload the geometry even under the threshold.
	if b.off != nil && e.Geometry.OffloadURI == "" && !e.Geometry.Missing {
		if err := b.offloadGeometry(ctx, e, in.Payload, nil); err != nil {
			return nil, nil, err
		}
		if data, err = e.encodeTrusted(); err != nil {
			return nil, nil, fmt.Errorf("envelope: build: %w", err)
		}
	}
	// 2. Offload the whole payload.
	if len(data) > limit && b.off != nil && e.RawPayloadOffloadURI == "" {
		ref, err := b.off.Put(ctx, in.Payload, offload.ExtJSON)
		if err != nil {
			return nil, nil, fmt.Errorf("envelope: offload payload: %w", err)
		}
		e.RawPayload, e.RawPayloadEncoding, e.RawPayloadOffloadURI = nil, "", ref.URI
		if data, err = e.encodeTrusted(); err != nil {
			return nil, nil, fmt.Errorf("envelope: build: %w", err)
		}
	}
	// 3. Truncate the error message, then the reason, with a marker.
	for range 8 {
		if len(data) <= limit {
			return e, data, nil
		}
		over := len(data) - limit
		target := &e.ErrorMessage
		if e.GeometryError != nil && len(e.GeometryError.Reason) > len(e.ErrorMessage) {
			target = &e.GeometryError.Reason
		}
		if !truncateMessage(target, over) {
			break
		}
		if data, err = e.encodeTrusted(); err != nil {
			return nil, nil, fmt.Errorf("envelope: build: %w", err)
		}
	}
	if len(data) <= limit {
		return e, data, nil
	}
	hint := "configure an Offloader to move geometry and payload out of the message"
	if e.RawPayloadOffloadURI != "" {
		hint = "payload and geometry were offloaded and the error message truncated"
	}
	return e, nil, &classify.TooLargeError{What: "envelope", Size: len(data), Limit: limit, Hint: hint}
}

// truncateMessage shortens *s so that its encoding shrinks by at least
// over bytes, at a rune boundary, ending with a marker that says how much
// was dropped. It reports false when nothing is left to cut.
func truncateMessage(s *string, over int) bool {
	orig := *s
	dropped := 0
	if i := lastMarker(orig); i >= 0 {
		// Already truncated: cut into the kept part, count from the original.
		var prev int
		if _, err := fmt.Sscanf(orig[i:], truncationMarker, &prev); err == nil {
			dropped = prev
		}
		orig = orig[:i]
	}
	markerLen := len(fmt.Sprintf(truncationMarker, dropped+len(orig)))
	// An escaped byte takes at most 6 bytes on the wire; one plain byte
	// at least 1. Cut enough raw bytes for the worst case we can count.
	cut := over + markerLen
	keep := len(orig) - cut
	if keep <= 0 {
		if orig == "" {
			return false
		}
		keep = 0
	}
	for keep > 0 && !utf8.RuneStart(orig[keep]) {
		keep--
	}
	dropped += len(orig) - keep
	*s = orig[:keep] + fmt.Sprintf(truncationMarker, dropped)
	return true
}

func lastMarker(s string) int {
	const head = "…[truncated by geodlq: "
	for i := len(s) - len(head); i >= 0; i-- {
		if s[i:i+len(head)] == head {
			return i
		}
	}
	return -1
}

// checkCallerFields validates what Build takes verbatim from the caller;
// everything else it constructs valid.
func checkCallerFields(in *Input) error {
	var vs []Violation
	if len(in.IdempotencyKey) > maxKeyLen {
		vs = append(vs, violation("idempotency_key", "max", fmt.Sprintf("idempotency_key longer than %d bytes", maxKeyLen)))
	}
	if len(in.EventID) > maxEventIDLen {
		vs = append(vs, violation("event_id", "max", fmt.Sprintf("event_id longer than %d bytes", maxEventIDLen)))
	}
	if len(in.TraceID) > maxTraceIDLen {
		vs = append(vs, violation("trace_id", "max", fmt.Sprintf("trace_id longer than %d bytes", maxTraceIDLen)))
	}
	if in.Source != nil {
		c := fieldCheck{vs: vs, prefix: "source."}
		c.source(in.Source)
		vs = c.vs
	}
	if len(vs) > 0 {
		return fmt.Errorf("envelope: build: %w", &ValidationError{Violations: vs})
	}
	return nil
}

// hashChunk bounds one call into the hash's assembly, which cannot be
// preempted: hashing 40 MB in one call would stall a garbage collection
// (and every goroutine it stops) for tens of milliseconds.
const hashChunk = 256 << 10

func sha256Chunked(b []byte) [sha256.Size]byte {
	h := sha256.New()
	for len(b) > 0 {
		n := min(len(b), hashChunk)
		h.Write(b[:n])
		b = b[n:]
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}
