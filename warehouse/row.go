package warehouse

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/geojson"
	"github.com/geodlq/geodlq/offload"
)

// Row is one dead letter as the warehouse holds it: one typed column per
// envelope field an analyst filters on, the fault point and the geometry's
// bounding box as WKB geometry columns, and where the record sits in its
// store. Every file geodlq writes has exactly these columns, in this
// order, whatever its options, so that every warehouse loads them with
// one schema.
//
// Optional columns are null rather than empty: a string column is null
// when the envelope has no value, and the geometry columns are null when
// there is no geometry to describe (geometry_status says why).
type Row struct {
	// EventID is the envelope's event_id.
	EventID string `parquet:"event_id"`
	// IdempotencyKey is the envelope's idempotency_key, verbatim.
	IdempotencyKey string `parquet:"idempotency_key"`
	// IdempotencyKeyDerived is true when geodlq derived the key from the
	// payload bytes.
	IdempotencyKeyDerived bool `parquet:"idempotency_key_derived"`
	// FailureClass is the failure class ("invalid_geometry", "crs_mismatch", …).
	FailureClass string `parquet:"failure_class"`
	// FailedStage is the stage that failed ("parse", "crs_transform", …).
	FailedStage string `parquet:"failed_stage"`
	// ReasonKind is the geometry error's bounded label
	// ("self_intersection", "crs_differs", …); null without one.
	ReasonKind string `parquet:"reason_kind,optional"`
	// Reason is the geometry error's reason, verbatim; null without one.
	Reason string `parquet:"reason,optional"`
	// ErrorMessage is the error's message, verbatim.
	ErrorMessage string `parquet:"error_message"`
	// EPSG is the EPSG code recorded for the payload's CRS, as geodlq
	// stats counts it (the CRS mismatch's code, else source_epsg); 0 when
	// unknown.
	EPSG int32 `parquet:"epsg"`
	// SourceCRS is the CRS the payload declared, verbatim; null when it
	// declared none.
	SourceCRS string `parquet:"source_crs,optional"`
	// GeometryCRS names the CRS of fault_point and geometry_bbox in this
	// row ("EPSG:3857", or "OGC:CRS84" for a payload that declared no CRS,
	// GeoJSON's default); null when the declared CRS has no EPSG code.
	// Every row of a file shares it, and the file's geo metadata states it.
	GeometryCRS string `parquet:"geometry_crs,optional"`
	// SourceSystem names the broker the event came from ("kafka", "sqs", …).
	SourceSystem string `parquet:"source_system,optional"`
	// SourceTopic is the topic, queue, stream or subject it came from.
	SourceTopic string `parquet:"source_topic,optional"`
	// SourcePartition is the Kafka partition, if any.
	SourcePartition *int32 `parquet:"source_partition,optional"`
	// SourceOffset is the Kafka offset or stream sequence, if any.
	SourceOffset *int64 `parquet:"source_offset,optional"`
	// SourceMessageID is the broker's message id, if any.
	SourceMessageID string `parquet:"source_message_id,optional"`
	// SourceURI is the event's source: the payload's source_uri member,
	// or its value at RowOptions.SourcePointer (see broker.SourceOf).
	SourceURI string `parquet:"source_uri,optional"`
	// SourcePrefix is SourceURI cut after the configured number of parts,
	// as geodlq stats --prefix-depth cuts it: "s3://provider-b" at depth
	// 1. Null when there is no source_uri (stats shows "(none)").
	SourcePrefix string `parquet:"source_prefix,optional"`
	// Attempts is how many times the event was tried.
	Attempts int32 `parquet:"attempts"`
	// FirstSeenAt is when the event was first received (UTC).
	FirstSeenAt time.Time `parquet:"first_seen_at,timestamp(microsecond)"`
	// DeadLetteredAt is when it was dead-lettered (UTC). Its date is the
	// dead_lettered_date partition.
	DeadLetteredAt time.Time `parquet:"dead_lettered_at,timestamp(microsecond)"`
	// Destination is the envelope's destination (wire name; Route in Go):
	// "retry" or "poison".
	Destination string `parquet:"destination"`
	// RepairStatus is the record's status in its store when it was
	// exported: "pending" (waiting for repair or replay), "leased" (a
	// replayer holds it) or "replayed" (repaired or replayed and
	// acknowledged); null when the store cannot tell.
	RepairStatus string `parquet:"repair_status,optional"`
	// ReplayedAt is when the record was acknowledged, if it was.
	ReplayedAt *time.Time `parquet:"replayed_at,optional,timestamp(microsecond)"`
	// PayloadSize is the original payload's size in bytes.
	PayloadSize int64 `parquet:"payload_size"`
	// PayloadSHA256 is the hex SHA-256 of the original payload.
	PayloadSHA256 string `parquet:"payload_sha256"`
	// GeometryType is the geometry's GeoJSON type, when known.
	GeometryType string `parquet:"geometry_type,optional"`
	// VertexCount is the number of positions in the geometry, when known.
	VertexCount *int64 `parquet:"vertex_count,optional"`
	// GeometryBytes is the geometry's size in bytes.
	GeometryBytes int64 `parquet:"geometry_bytes"`
	// GeometryOffloaded is true when the geometry lives in a blob store.
	GeometryOffloaded bool `parquet:"geometry_offloaded"`
	// PayloadOffloaded is true when the whole payload lives in a blob store.
	PayloadOffloaded bool `parquet:"payload_offloaded"`
	// TraceID correlates the event with traces and logs, if known.
	TraceID string `parquet:"trace_id,optional"`
	// FaultPart, FaultRing and FaultVertex locate the offending position
	// in the input's coordinate arrays (-1: not applicable); null without
	// a located fault.
	FaultPart *int32 `parquet:"fault_part,optional"`
	// FaultRing: see FaultPart.
	FaultRing *int32 `parquet:"fault_ring,optional"`
	// FaultVertex: see FaultPart.
	FaultVertex *int32 `parquet:"fault_vertex,optional"`
	// FaultOnSegment is true when the fault lies on the segment from
	// FaultVertex to the next vertex.
	FaultOnSegment *bool `parquet:"fault_on_segment,optional"`
	// FaultPoint is the geometry error's location as a WKB Point in the
	// payload's coordinates (GeoParquet geometry column); null without one.
	FaultPoint []byte `parquet:"fault_point,optional"`
	// GeometryBBox is the bounding box of the event's geometry as a WKB
	// Polygon (GeoParquet geometry column, the file's primary column);
	// null when geometry_status is not "ok".
	GeometryBBox []byte `parquet:"geometry_bbox,optional"`
	// BBox is GeometryBBox as four numbers, GeoParquet 1.1's bbox covering
	// of geometry_bbox: warehouses filter on it without decoding WKB.
	BBox *BBox `parquet:"bbox,optional"`
	// GeometryStatus says what became of the geometry: "ok", "missing"
	// (the payload had none), "empty" (no positions), "unparseable",
	// "non_finite" (no finite position), "offloaded_not_fetched" (no blob
	// store given), "fetch_failed" or "outside_crs_area" (its coordinates
	// lie outside the valid area of geometry_crs, a geographic CRS:
	// longitude beyond ±180 or latitude beyond ±90, as metres labelled
	// EPSG:4326 do; geometry_bbox and bbox are then null, and so is
	// fault_point when it lies outside too).
	GeometryStatus string `parquet:"geometry_status"`
	// Payload is the original payload, restored and verified against
	// payload_sha256; null unless the export was asked for payloads
	// (and then null when payload_status is not "ok").
	Payload []byte `parquet:"payload,optional"`
	// PayloadStatus is "not_exported" (the default), "ok",
	// "offloaded_not_fetched", "fetch_failed" or "integrity_error".
	PayloadStatus string `parquet:"payload_status"`
	// RecordID is the record's id in its store.
	RecordID string `parquet:"record_id"`
	// DLQDestination is the store destination (queue, table partition,
	// stream) the record is in.
	DLQDestination string `parquet:"dlq_destination"`
	// PublishedAt is when the store received the record, if it says.
	PublishedAt *time.Time `parquet:"published_at,optional,timestamp(microsecond)"`
	// ExportedAt is when the export or sync run started.
	ExportedAt time.Time `parquet:"exported_at,timestamp(microsecond)"`
}

// BBox is a bounding box column: GeoParquet 1.1's bbox covering struct.
type BBox struct {
	XMin float64 `parquet:"xmin"`
	YMin float64 `parquet:"ymin"`
	XMax float64 `parquet:"xmax"`
	YMax float64 `parquet:"ymax"`
}

// The geometry_status values.
const (
	GeometryOK          = "ok"
	GeometryMissing     = "missing"
	GeometryEmpty       = "empty"
	GeometryUnparseable = "unparseable"
	GeometryNonFinite   = "non_finite"
	GeometryNotFetched  = "offloaded_not_fetched"
	GeometryFetchFailed = "fetch_failed"
	GeometryOutsideCRS  = "outside_crs_area"
)

// The payload_status values.
const (
	PayloadNotExported = "not_exported"
	PayloadOK          = "ok"
	PayloadNotFetched  = "offloaded_not_fetched"
	PayloadFetchFailed = "fetch_failed"
	PayloadIntegrity   = "integrity_error"
)

// The CRS names of the geometry_crs column that are not "EPSG:<code>".
const (
	// CRS84 is GeoJSON's default CRS (longitude, latitude on WGS 84),
	// assumed for a payload that declares none; GeoParquet's default too,
	// so its files carry no crs member.
	CRS84 = "OGC:CRS84"
)

// RowOptions shape how records become rows.
type RowOptions struct {
	// WithPayload adds the original payload to every row (the payload
	// column), restored from the store and its blobs and verified against
	// payload_sha256. Off by default: a payload may hold personal or
	// confidential data that the warehouse should not.
	WithPayload bool
	// Fetcher reads offloaded blobs (an *offload.Offloader): the geometry,
	// for its bounding box, and with WithPayload the payload. Nil: rows of
	// offloaded geometries have no bounding box (geometry_status
	// "offloaded_not_fetched"), and offloaded payloads are not exported.
	Fetcher envelope.Fetcher
	// PrefixDepth is how many parts of source_uri source_prefix keeps: 1
	// (the default) keeps the scheme and host, "s3://provider-b"; each
	// further part one path segment.
	PrefixDepth int
	// SourcePointer is the JSON pointer (RFC 6901) into the event that
	// names its source ("/properties/provider"), as geodlq list and stats
	// --source-pointer: the source_uri column holds the event's value
	// there (see broker.SourceValue) and source_prefix is cut from it.
	// Default broker.DefaultSourcePointer, the payload's source_uri.
	SourcePointer string
	// Limits bound parsing the geometry for its bounding box. The zero
	// value uses internal/geojson's defaults (5,000,000 positions, …); a
	// geometry over them gets geometry_status "unparseable".
	Limits geojson.Limits
	// CRS resolves EPSG codes to PROJJSON, to tell geographic CRSs, whose
	// valid area rows are checked against (geometry_status
	// "outside_crs_area"), from projected ones, which are not checked.
	// Nil: [BuiltinCRS] only; OGC:CRS84 is always geographic.
	CRS CRSResolver
}

func (o RowOptions) withDefaults() RowOptions {
	if o.PrefixDepth <= 0 {
		o.PrefixDepth = 1
	}
	return o
}

// SourcePrefix cuts a source URI after depth parts, the first being
// scheme://host and each further one a path segment, as geodlq stats
// --prefix-depth does; "" for "".
func SourcePrefix(uri string, depth int) string {
	if uri == "" {
		return ""
	}
	depth = max(depth, 1)
	scheme, rest, ok := strings.Cut(uri, "://")
	if !ok {
		rest = uri
	}
	parts := strings.SplitN(rest, "/", depth+1)
	if len(parts) > depth {
		parts = parts[:depth]
	}
	p := strings.Join(parts, "/")
	if ok {
		p = scheme + "://" + p
	}
	return p
}

// GeometryCRSOf returns the CRS of env's coordinates as the geometry_crs
// column names it: "EPSG:<code>" for a declared CRS with an EPSG code,
// [CRS84] when the payload declared none, "" when the declared CRS has no
// EPSG code (unknown).
func GeometryCRSOf(env *envelope.Envelope) string {
	switch {
	case env.SourceEPSG > 0:
		return "EPSG:" + strconv.Itoa(env.SourceEPSG)
	case env.SourceCRS == "":
		return CRS84
	}
	return ""
}

// converter turns entries into rows.
type converter struct {
	o   RowOptions
	geo map[string]bool // geometry_crs value -> geographic, once resolved
}

// geographic reports whether the geometry_crs value name is a geographic
// CRS: OGC:CRS84, or an EPSG code whose PROJJSON ([BuiltinCRS], else
// RowOptions.CRS) is a GeographicCRS. An unknown CRS is not.
func (c *converter) geographic(name string) bool {
	if name == CRS84 {
		return true
	}
	if g, ok := c.geo[name]; ok {
		return g
	}
	g := false
	if code, ok := parseEPSGName(name); ok && code > 0 {
		b, err := BuiltinCRS(code)
		if (err != nil || b == nil) && c.o.CRS != nil {
			b, err = c.o.CRS(code)
		}
		var def struct {
			Type string `json:"type"`
		}
		g = err == nil && json.Unmarshal(b, &def) == nil && def.Type == "GeographicCRS"
	}
	if c.geo == nil {
		c.geo = map[string]bool{}
	}
	c.geo[name] = g
	return g
}

// lonLat reports whether (x, y) is a longitude and a latitude.
func lonLat(x, y float64) bool { return x >= -180 && x <= 180 && y >= -90 && y <= 90 }

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// row fills r from e and its decoded envelope.
func (c *converter) row(ctx context.Context, r *Row, e broker.Entry, env *envelope.Envelope, exportedAt time.Time) {
	*r = Row{
		EventID: env.EventID, IdempotencyKey: env.IdempotencyKey, IdempotencyKeyDerived: env.IdempotencyKeyDerived,
		FailureClass: string(env.FailureClass), FailedStage: string(env.FailedStage), ErrorMessage: env.ErrorMessage,
		EPSG: clampInt32(broker.EPSGOf(env)), SourceCRS: env.SourceCRS, GeometryCRS: GeometryCRSOf(env),
		Attempts: clampInt32(env.Attempts), FirstSeenAt: env.FirstSeenAt.UTC(), DeadLetteredAt: env.DeadLetteredAt.UTC(),
		Destination: string(env.Route), RepairStatus: string(e.Status),
		PayloadSize: env.PayloadSize, PayloadSHA256: env.PayloadSHA256, GeometryType: env.GeometryType,
		GeometryBytes: env.Geometry.ByteSize, GeometryOffloaded: env.Geometry.OffloadURI != "",
		PayloadOffloaded: env.RawPayloadOffloadURI != "", TraceID: env.TraceID,
		PayloadStatus: PayloadNotExported, RecordID: e.Record.ID, DLQDestination: e.Record.Destination,
		ExportedAt: exportedAt.UTC(),
	}
	if env.VertexCount > 0 {
		v := int64(env.VertexCount)
		r.VertexCount = &v
	}
	if !e.ReplayedAt.IsZero() {
		t := e.ReplayedAt.UTC()
		r.ReplayedAt = &t
	}
	if !e.PublishedAt.IsZero() {
		t := e.PublishedAt.UTC()
		r.PublishedAt = &t
	}
	if s := env.Source; s != nil {
		r.SourceSystem, r.SourceTopic, r.SourceMessageID = s.System, s.Topic, s.MessageID
		r.SourcePartition, r.SourceOffset = s.Partition, s.Offset
	}
	r.SourceURI = broker.SourceOf(env, c.o.SourcePointer)
	r.SourcePrefix = SourcePrefix(r.SourceURI, c.o.PrefixDepth)
	if ge := env.GeometryError; ge != nil {
		r.ReasonKind, r.Reason = ge.Kind, ge.Reason
		if loc := ge.Location; len(loc) == 2 && finite(loc[0]) && finite(loc[1]) &&
			(lonLat(loc[0], loc[1]) || !c.geographic(r.GeometryCRS)) {
			r.FaultPoint = appendWKBPoint(make([]byte, 0, 21), ge.Location[0], ge.Location[1])
		}
		if f := ge.Fault; f != nil {
			part, ring, vertex, seg := clampInt32(f.Part), clampInt32(f.Ring), clampInt32(f.Vertex), f.OnSegment
			r.FaultPart, r.FaultRing, r.FaultVertex, r.FaultOnSegment = &part, &ring, &vertex, &seg
		}
	}
	var payload []byte
	if c.o.WithPayload {
		payload, r.PayloadStatus = c.payload(ctx, env)
		r.Payload = payload
	}
	r.GeometryStatus = c.bbox(ctx, r, env, payload)
}

// payload restores and verifies the original payload.
func (c *converter) payload(ctx context.Context, env *envelope.Envelope) ([]byte, string) {
	if (env.RawPayloadOffloadURI != "" || env.Geometry.OffloadURI != "") && c.o.Fetcher == nil {
		return nil, PayloadNotFetched
	}
	b, err := env.Restore(ctx, c.o.Fetcher)
	switch {
	case err == nil:
		return b, PayloadOK
	case errors.Is(err, offload.ErrIntegrity):
		return nil, PayloadIntegrity
	default:
		return nil, PayloadFetchFailed
	}
}

// bbox sets the geometry columns from the envelope's geometry: inline, in
// the restored payload, or fetched.
func (c *converter) bbox(ctx context.Context, r *Row, env *envelope.Envelope, payload []byte) string {
	g := &env.Geometry
	if g.Missing {
		return GeometryMissing
	}
	data := g.Inline
	if g.OffloadURI != "" {
		off, end := g.PayloadOffset, g.PayloadOffset+g.ByteSize
		switch {
		case payload != nil && off >= 0 && end <= int64(len(payload)) && end >= off:
			data = payload[off:end] // spliced back in and verified by Restore
		case c.o.Fetcher == nil:
			return GeometryNotFetched
		default:
			var err error
			if data, err = c.o.Fetcher.Fetch(ctx, offload.Ref{URI: g.OffloadURI, Size: g.ByteSize, SHA256: g.ContentSHA256}); err != nil {
				return GeometryFetchFailed
			}
		}
	}
	parsed, err := geojson.ParseGeometry(data, c.o.Limits)
	if err != nil || parsed.Geom == nil {
		return GeometryUnparseable
	}
	if len(parsed.Points) == 0 {
		return GeometryEmpty
	}
	bb := BBox{XMin: math.Inf(1), YMin: math.Inf(1), XMax: math.Inf(-1), YMax: math.Inf(-1)}
	for _, p := range parsed.Points {
		if !finite(p[0]) || !finite(p[1]) {
			continue
		}
		bb.XMin, bb.YMin = min(bb.XMin, p[0]), min(bb.YMin, p[1])
		bb.XMax, bb.YMax = max(bb.XMax, p[0]), max(bb.YMax, p[1])
	}
	if bb.XMin > bb.XMax {
		return GeometryNonFinite
	}
	if c.geographic(r.GeometryCRS) && (!lonLat(bb.XMin, bb.YMin) || !lonLat(bb.XMax, bb.YMax)) {
		return GeometryOutsideCRS
	}
	r.BBox = &bb
	r.GeometryBBox = appendWKBBox(make([]byte, 0, 93), bb)
	return GeometryOK
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

func clampInt32(v int) int32 {
	return int32(min(max(v, math.MinInt32), math.MaxInt32))
}
