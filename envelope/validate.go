package envelope

import (
	"errors"
	"fmt"
	"strings"

	"github.com/geodlq/geodlq/classify"
)

var (
	// ErrInvalid is wrapped by every [*ValidationError].
	ErrInvalid = errors.New("envelope: invalid envelope")
	// ErrUnsupportedVersion is wrapped by every [*VersionError].
	ErrUnsupportedVersion = errors.New("envelope: unsupported schema version")
	// ErrNoFetcher is wrapped by [Envelope.Restore] when the envelope's
	// geometry or payload is offloaded and no Fetcher was given.
	ErrNoFetcher = errors.New("envelope: restore needs a Fetcher: the envelope refers to an offloaded blob")
)

// Violation is one broken rule of an envelope.
type Violation struct {
	// Field is the wire path of the field, e.g. "geometry.content_sha256";
	// empty for the document as a whole.
	Field string
	// Rule names the rule: a validator tag of the struct field
	// ("required", "max", "oneof", …; see [Envelope]) or one of ours ("sha256hex", "exactly_one", "destination", "epsg",
	// "json", "type", …).
	Rule string
	// Message explains the violation in a sentence.
	Message string
}

func violation(field, rule, msg string) Violation {
	return Violation{Field: field, Rule: rule, Message: msg}
}

// ValidationError lists every rule an envelope breaks. It wraps
// [ErrInvalid].
type ValidationError struct {
	// Violations lists every broken rule, in the order they were checked.
	Violations []Violation
}

// Error implements error.
func (e *ValidationError) Error() string {
	var b strings.Builder
	b.WriteString("envelope: invalid envelope: ")
	for i, v := range e.Violations {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(v.Message)
	}
	return b.String()
}

// Unwrap returns [ErrInvalid].
func (e *ValidationError) Unwrap() error { return ErrInvalid }

// Fields returns the fields that have violations, in order, without
// duplicates.
func (e *ValidationError) Fields() []string {
	var out []string
	seen := map[string]bool{}
	for _, v := range e.Violations {
		if !seen[v.Field] {
			seen[v.Field] = true
			out = append(out, v.Field)
		}
	}
	return out
}

func invalid(vs ...Violation) error { return &ValidationError{Violations: vs} }

// VersionError reports an envelope whose schema_version this package does
// not read. It wraps [ErrUnsupportedVersion].
type VersionError struct {
	// Version is the schema_version found; empty when it was missing.
	Version string
}

// Error implements error.
func (e *VersionError) Error() string {
	if e.Version == "" {
		return fmt.Sprintf("envelope: unsupported schema version: schema_version missing, want %q", SchemaVersion)
	}
	return fmt.Sprintf("envelope: unsupported schema version %q, want %q", e.Version, SchemaVersion)
}

// Unwrap returns [ErrUnsupportedVersion].
func (e *VersionError) Unwrap() error { return ErrUnsupportedVersion }

func isHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Validate checks every rule of the dlq.v1 format and returns a
// [*ValidationError] listing each violation, or nil. Beyond the struct
// tags (required fields, lengths, ranges) the rules are:
//
//   - schema_version is "dlq.v1";
//   - failure_class and failed_stage are defined values;
//   - destination is "retry" or "poison", and a deterministic class
//     (invalid_geometry, schema_violation, crs_mismatch,
//     resource_exhausted) goes only to "poison";
//   - an invalid_geometry carries geometry_error, and a crs_mismatch
//     carries it with epsg present (0 when the CRS has no known EPSG code);
//   - first_seen_at and dead_lettered_at are set (in years 2–9999: year 1
//     holds Go's zero time);
//   - offload_uri and raw_payload_offload_uri are absolute URIs of
//     printable ASCII;
//   - the geometry is exactly one of inline and offload_uri; inline
//     geometry is byte_size bytes long; content_sha256 and payload_sha256
//     are 64 lowercase hex digits;
//   - payload_offset is -1 exactly when the geometry is missing, and an
//     offloaded geometry has a location in the payload;
//   - raw_payload and raw_payload_offload_uri are not both set (a non-nil
//     RawPayload counts as set, even when empty), and
//     raw_payload is payload_size bytes long (less the offloaded geometry's
//     byte_size, plus its {"$ref":…} object);
//   - the encodings named can carry their bytes exactly.
//
// Validate does not hash anything; [Envelope.Restore] verifies content.
func (e *Envelope) Validate() error { return e.validate(nil) }

func (e *Envelope) validate(vs []Violation) error { return e.check(vs, true) }

// check appends e's violations to vs; encodings false skips whether the
// encodings named can carry their bytes, for a caller that made sure of
// it (decodeFast: the bytes it scanned once).
func (e *Envelope) check(vs []Violation, encodings bool) error {
	vs = e.fieldViolations(vs)
	add := func(field, rule, msg string) { vs = append(vs, violation(field, rule, msg)) }
	if e.SchemaVersion != SchemaVersion {
		add("schema_version", "eq", fmt.Sprintf("schema_version is %q, want %q", e.SchemaVersion, SchemaVersion))
	}
	if !e.FailureClass.Valid() {
		add("failure_class", "oneof", "failure_class is not a defined class")
	}
	if !e.FailedStage.Valid() {
		add("failed_stage", "oneof", "failed_stage is not a defined stage")
	}
	if e.FailureClass.Deterministic() && e.Route != classify.RoutePoison {
		add("destination", "destination", fmt.Sprintf("failure_class %s is deterministic and must go to \"poison\", not %q", e.FailureClass, string(e.Route)))
	}
	if e.FailureClass == classify.ClassInvalidGeometry && e.GeometryError == nil {
		add("geometry_error", "required", "an invalid_geometry must record geometry_error")
	}
	if e.FailureClass == classify.ClassCRSMismatch && (e.GeometryError == nil || e.GeometryError.EPSG == nil) {
		add("geometry_error.epsg", "epsg", "a crs_mismatch must record geometry_error.epsg (0 when unknown)")
	}
	// Year 1 holds Go's zero time, which means unset.
	if e.FirstSeenAt.Year() < 2 {
		add("first_seen_at", "required", "first_seen_at is required (a time in years 0002–9999)")
	}
	if e.DeadLetteredAt.Year() < 2 {
		add("dead_lettered_at", "required", "dead_lettered_at is required (a time in years 0002–9999)")
	}
	for _, u := range []struct{ field, uri string }{
		{"geometry.offload_uri", e.Geometry.OffloadURI}, {"raw_payload_offload_uri", e.RawPayloadOffloadURI},
	} {
		if u.uri != "" && !schemaPatterns().uri.MatchString(u.uri) {
			add(u.field, "uri", u.field+" is not an absolute URI of printable ASCII")
		}
	}
	g := &e.Geometry
	switch {
	case g.OffloadURI != "" && g.Inline != nil:
		add("geometry", "exactly_one", "geometry has both inline and offload_uri")
	case g.OffloadURI == "" && g.Inline == nil:
		add("geometry", "exactly_one", "geometry has neither inline nor offload_uri")
	case g.Inline != nil && int64(len(g.Inline)) != g.ByteSize:
		add("geometry.byte_size", "byte_size", fmt.Sprintf("geometry.byte_size is %d but inline holds %d bytes", g.ByteSize, len(g.Inline)))
	}
	if encodings && g.Inline != nil && g.InlineEncoding != "" && !applicable(g.InlineEncoding, g.Inline) {
		add("geometry.inline_encoding", "encoding", fmt.Sprintf("geometry.inline_encoding %q cannot carry the inline bytes exactly", g.InlineEncoding))
	}
	if g.Missing != (g.PayloadOffset == -1) {
		add("geometry.payload_offset", "payload_offset", "geometry.payload_offset must be -1 exactly when the geometry is missing")
	}
	if g.Missing && g.OffloadURI != "" {
		add("geometry.missing", "missing", "a missing geometry cannot be offloaded")
	}
	if g.PayloadOffset < -1 || g.PayloadOffset > e.PayloadSize {
		add("geometry.payload_offset", "range", fmt.Sprintf("geometry.payload_offset %d outside [-1, payload_size]", g.PayloadOffset))
	}
	if e.RawPayloadOffloadURI != "" && e.RawPayload != nil {
		add("raw_payload", "exactly_one", "raw_payload and raw_payload_offload_uri are both set")
	}
	if e.RawPayloadOffloadURI == "" && g.OffloadURI == "" && int64(len(e.RawPayload)) != e.PayloadSize {
		add("payload_size", "payload_size", fmt.Sprintf("payload_size is %d but raw_payload holds %d bytes", e.PayloadSize, len(e.RawPayload)))
	}
	if e.RawPayloadOffloadURI == "" && g.OffloadURI != "" {
		refLen := int64(len(`{"$ref":""}`) + len(g.OffloadURI))
		if want := e.PayloadSize - g.ByteSize + refLen; int64(len(e.RawPayload)) != want {
			add("payload_size", "payload_size", fmt.Sprintf("raw_payload holds %d bytes; payload_size, byte_size and the $ref say %d", len(e.RawPayload), want))
		}
	}
	if encodings && e.RawPayloadOffloadURI == "" && e.RawPayloadEncoding != "" && !applicable(e.RawPayloadEncoding, e.RawPayload) {
		add("raw_payload_encoding", "encoding", fmt.Sprintf("raw_payload_encoding %q cannot carry the payload bytes exactly", e.RawPayloadEncoding))
	}
	if len(vs) > 0 {
		return &ValidationError{Violations: vs}
	}
	return nil
}
