package envelope

import (
	"time"

	"github.com/geodlq/geodlq/classify"
)

// Length limits, mirrored in the validate tags.
const (
	maxEventIDLen = 1024
	maxKeyLen     = 65536
	maxTraceIDLen = 256
	maxLabelLen   = 64 // geometry_type, geometry_error.kind
)

// SchemaVersion is the wire format version written by this package and the
// only one [Decode] accepts.
const SchemaVersion = "dlq.v1"

// Envelope is a dead-lettered spatial event: everything a replay needs to
// act on it safely. Field names on the wire are those of the dlq.v1 format;
// see the package documentation for the table. The validate tags of it and
// of the types it holds state the field rules in go-playground/validator's
// notation; [Envelope.Validate] checks them by hand (a test checks the two
// agree), so that linking envelope does not link validator.
type Envelope struct {
	// SchemaVersion is always "dlq.v1".
	SchemaVersion string `json:"schema_version" validate:"required"`
	// EventID identifies the event: the payload's event_id (or id) member
	// when it has one, else derived from the idempotency key.
	EventID string `json:"event_id" validate:"required,max=1024"` // max: maxEventIDLen
	// IdempotencyKey is the key assigned at ingestion — an idempotency-key
	// header, else the event's own key member (see
	// [BuilderOptions].IdempotencyKeyPath) — preserved verbatim. Replay
	// re-injects with it and never re-derives it.
	IdempotencyKey string `json:"idempotency_key" validate:"required,max=65536"` // max: maxKeyLen
	// IdempotencyKeyDerived is true when the event came with no key and
	// one was derived: by [Builder.Build] from the payload bytes (see
	// PayloadKeyNamespace), or by the caller (broker.Processor, from the
	// message's source and body; see [Input].IdempotencyKeyDerived).
	// Replay then dedupes on content rather than on the producer's
	// identity.
	IdempotencyKeyDerived bool `json:"idempotency_key_derived,omitempty"`
	// FailureClass is the class the failure was given.
	FailureClass classify.Class `json:"failure_class" validate:"required"`
	// FailedStage is the pipeline stage that failed.
	FailedStage classify.Stage `json:"failed_stage" validate:"required"`
	// ErrorMessage is the error's message, verbatim.
	ErrorMessage string `json:"error_message"`
	// GeometryError is the geometry detail, when the failure has one.
	GeometryError *GeometryError `json:"geometry_error,omitempty"`
	// SourceCRS is the CRS the payload declared (its "crs" member, a string
	// or a GeoJSON-2008 named CRS object), verbatim; empty when the payload
	// declared none (or it was null).
	SourceCRS string `json:"source_crs" validate:"max=4096"`
	// SourceEPSG is the EPSG code SourceCRS resolved to, or 0 when unknown
	// or unresolvable.
	SourceEPSG int `json:"source_epsg,omitempty" validate:"min=0"`
	// Geometry holds the geometry inline or points at its offloaded blob.
	Geometry GeometryRef `json:"geometry"`
	// GeometryType is the geometry's GeoJSON type, when known.
	GeometryType string `json:"geometry_type,omitempty" validate:"max=64"`
	// VertexCount is the number of positions in the geometry, when known.
	VertexCount int `json:"vertex_count,omitempty" validate:"min=0"`

	// RawPayload is the original payload as persisted: byte for byte what
	// the consumer received, except that an offloaded geometry's value is
	// replaced by {"$ref": "<offload_uri>"}. Its representation on the wire
	// is given by RawPayloadEncoding. Empty when the whole payload was
	// offloaded (RawPayloadOffloadURI).
	RawPayload []byte `json:"-"`
	// RawPayloadEncoding says how raw_payload is written: "json" (the bytes
	// themselves, embedded verbatim), "string" (a JSON string holding the
	// bytes, for valid UTF-8 that is not a JSON document) or "base64".
	// Empty means "json" on the wire and lets [Envelope.Encode] choose with
	// [ChooseEncoding].
	RawPayloadEncoding string `json:"raw_payload_encoding,omitempty" validate:"omitempty,oneof=json string base64"`
	// RawPayloadOffloadURI points at the whole original payload (its exact
	// bytes, so payload_size and payload_sha256 describe the blob) when the
	// envelope was too large for its destination even after offloading the
	// geometry. RawPayload is then nil.
	RawPayloadOffloadURI string `json:"raw_payload_offload_uri,omitempty" validate:"max=2048"`
	// PayloadSHA256 is the hex SHA-256 of the exact original payload bytes.
	PayloadSHA256 string `json:"payload_sha256" validate:"sha256hex"`
	// PayloadSize is the length of the original payload in bytes.
	PayloadSize int64 `json:"payload_size" validate:"min=0"`

	// Attempts is how many times the event was tried before it was
	// dead-lettered (at least 1).
	Attempts int `json:"attempts" validate:"min=1"`
	// FirstSeenAt is when the event was first received.
	FirstSeenAt time.Time `json:"first_seen_at"`
	// DeadLetteredAt is when the envelope was built.
	DeadLetteredAt time.Time `json:"dead_lettered_at"`
	// Route is "retry" or "poison" ([classify.RouteFor] the class): which
	// of a source topic's two dead-letter destinations the envelope went
	// to. Its wire name is "destination", the seed's.
	Route classify.Route `json:"destination" validate:"required,oneof=retry poison"`
	// TraceID correlates the event with traces and logs, if known.
	TraceID string `json:"trace_id,omitempty" validate:"max=256"` // max: maxTraceIDLen
	// Source is the broker provenance of the failed message.
	Source *Source `json:"source,omitempty"`
}

// GeometryError is the geometry detail of a failure.
type GeometryError struct {
	// Reason is the validity reason verbatim, e.g. "Self-intersection[0.5 0.5]".
	Reason string `json:"reason"`
	// Kind is the bounded label of Reason ("self_intersection", …).
	Kind string `json:"kind,omitempty" validate:"max=64"`
	// Location is the offending vertex [x, y], if known.
	Location []float64 `json:"location,omitempty" validate:"omitnil,len=2,dive,finite"`
	// EPSG is the EPSG code involved in a CRS mismatch (0: unparseable or
	// without an EPSG code). Present for every crs_mismatch.
	EPSG *int `json:"epsg,omitempty" validate:"omitnil,min=0"`
	// Fault locates the offending vertex or segment in the input.
	Fault *classify.Fault `json:"fault,omitempty"`
}

// GeometryRef holds the geometry inline or points at its offloaded blob:
// exactly one of Inline and OffloadURI is set.
type GeometryRef struct {
	// Inline is the geometry's bytes exactly as they appeared in the
	// payload. On the wire it is embedded as JSON when it is a JSON
	// document, else per InlineEncoding.
	Inline []byte `json:"-"`
	// InlineEncoding is "json", "string" or "base64", as for raw_payload;
	// empty means "json" on the wire and lets Encode choose.
	InlineEncoding string `json:"inline_encoding,omitempty" validate:"omitempty,oneof=json string base64"`
	// OffloadURI is the blob's address: <store base>/<prefix>/<sha256>.geojson.
	OffloadURI string `json:"offload_uri,omitempty" validate:"max=2048"`
	// ByteSize is the geometry's size in bytes.
	ByteSize int64 `json:"byte_size" validate:"min=0"`
	// ContentSHA256 is the hex SHA-256 of the geometry's exact bytes.
	ContentSHA256 string `json:"content_sha256" validate:"sha256hex"`
	// PayloadOffset is where the geometry's value starts in the original
	// payload, or -1 when the payload has no locatable geometry (the inline
	// value is then an empty GeometryCollection placeholder). For an
	// offloaded geometry, the persisted raw payload holds the $ref object at
	// this offset.
	PayloadOffset int64 `json:"payload_offset" validate:"min=-1"`
	// Missing is true when the payload had no geometry (absent, null, or the
	// payload is not JSON) and Inline is a placeholder.
	Missing bool `json:"missing,omitempty"`
}

// Source is the broker provenance of the failed message.
type Source struct {
	// System names the broker: "kafka", "sqs", "pubsub", "redis", "nats",
	// "rabbitmq", "servicebus", "memory", ….
	System string `json:"system" validate:"required,max=64"`
	// Topic is the topic, queue, stream or subject the message came from.
	Topic string `json:"topic,omitempty" validate:"max=1024"`
	// Partition is the Kafka partition, if any.
	Partition *int32 `json:"partition,omitempty"`
	// Offset is the Kafka offset (or stream sequence), if any.
	Offset *int64 `json:"offset,omitempty"`
	// MessageID is the broker's message id, if any.
	MessageID string `json:"message_id,omitempty" validate:"max=1024"`
	// Key is the message's ordering/partition key, if any; replay
	// re-injects with it so per-entity ordering is kept.
	Key []byte `json:"key,omitempty"`
	// GroupID is the SQS FIFO MessageGroupId (or equivalent), if any.
	GroupID string `json:"group_id,omitempty" validate:"max=1024"`
	// DedupID is the SQS FIFO MessageDeduplicationId, if any.
	DedupID string `json:"dedup_id,omitempty" validate:"max=1024"`
	// DeliveryCount is the broker's delivery count for the message, if
	// reported.
	DeliveryCount int `json:"delivery_count,omitempty" validate:"min=0"`
	// Timestamp is the message's broker timestamp, if any.
	Timestamp *time.Time `json:"timestamp,omitempty"`
}
