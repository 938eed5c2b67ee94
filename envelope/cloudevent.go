package envelope

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"mime"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// The CloudEvents binding: a dead letter as a CloudEvents 1.0 event in
// structured JSON mode, the envelope as its data and the fields a router
// filters on as extension attributes. See [ToCloudEvent].
const (
	// CloudEventType is the type attribute of a dead-letter event.
	CloudEventType = "io.github.geodlq.dlq.v1"
	// CloudEventsMediaType is the media type of an event in structured
	// JSON mode, for the Content-Type of the message that carries it.
	CloudEventsMediaType = "application/cloudevents+json"
	// CloudEventSpecVersion is the CloudEvents version written and read.
	CloudEventSpecVersion = "1.0"
)

// The extension attributes [ToCloudEvent] sets, mirroring the dlq-*
// message headers of package broker. CloudEvents attribute names are
// lower-case ASCII letters and digits, 20 characters at most.
const (
	ExtClass          = "dlqclass"          // failure_class
	ExtStage          = "dlqstage"          // failed_stage
	ExtDestination    = "dlqdestination"    // retry or poison
	ExtIdempotencyKey = "dlqidempotencykey" // idempotency_key
	ExtAttempts       = "dlqattempts"       // attempts (Integer; absent beyond 2^31-1)
	ExtFirstSeenAt    = "dlqfirstseenat"    // first_seen_at (Timestamp)
	ExtPayloadSHA256  = "dlqpayloadsha256"  // payload_sha256
	ExtEPSG           = "dlqepsg"           // source_epsg (Integer; absent when unknown)
)

// ErrCloudEvent is wrapped by every [*CloudEventError].
var ErrCloudEvent = errors.New("envelope: not a dead-letter CloudEvent")

// CloudEventError reports a CloudEvent that [FromCloudEvent] refuses: it
// breaks the CloudEvents 1.0 JSON format, or is not a dead letter, or its
// extension attributes contradict the envelope it carries. It wraps
// [ErrCloudEvent]. An envelope that is itself invalid yields Decode's
// error instead.
type CloudEventError struct {
	// Attribute is the attribute at fault, or "" for the event as a whole.
	Attribute string
	// Problem says what is wrong.
	Problem string
}

// Error implements error.
func (e *CloudEventError) Error() string {
	if e.Attribute == "" {
		return "envelope: not a dead-letter CloudEvent: " + e.Problem
	}
	return fmt.Sprintf("envelope: not a dead-letter CloudEvent: %s: %s", e.Attribute, e.Problem)
}

// Unwrap returns [ErrCloudEvent].
func (e *CloudEventError) Unwrap() error { return ErrCloudEvent }

func ceError(attr, format string, args ...any) error {
	return &CloudEventError{Attribute: attr, Problem: fmt.Sprintf(format, args...)}
}

// CloudEventOptions configures [ToCloudEvent]. The zero value (and nil)
// uses the defaults.
type CloudEventOptions struct {
	// Source is the source attribute, a URI-reference naming where the
	// dead letter comes from. Default: "/geodlq/<system>/<topic>" from the
	// envelope's broker provenance (path-escaped), "/geodlq" without it.
	Source string
	// ID is the id attribute. Default: the hex SHA-256 of the encoded
	// envelope, so that the same dead letter sent twice has the same
	// source and id, and two dead-letterings of one event differ.
	ID string
	// Base64Data writes the envelope as data_base64 rather than as a JSON
	// value. An envelope embeds its payload verbatim, insignificant
	// whitespace included; an intermediary that re-serialises JSON data
	// (the CloudEvents Go SDK compacts it when it writes an event) breaks
	// such a payload, which FromCloudEvent then refuses as invalid. Base64
	// data travels through anything.
	Base64Data bool
}

// ToCloudEvent returns e as a CloudEvents 1.0 event in structured JSON
// mode ([CloudEventsMediaType]):
//
//   - specversion "1.0", type [CloudEventType], id and source (see
//     [CloudEventOptions]), subject the event_id, time the
//     dead_lettered_at, datacontenttype "application/json" and dataschema
//     [SchemaID];
//   - data the envelope's encoding, embedded byte for byte (a JSON
//     object, so a consumer's JSON parser reads it directly), or
//     data_base64 (see [CloudEventOptions].Base64Data);
//   - the extension attributes [ExtClass], [ExtStage], [ExtDestination],
//     [ExtIdempotencyKey], [ExtAttempts], [ExtFirstSeenAt],
//     [ExtPayloadSHA256] and [ExtEPSG], so that a broker or router can
//     filter dead letters without reading the data.
//
// The binding uses the standard library only: the CloudEvents Go SDK
// would more than double the core module's dependency graph (it brings
// json-iterator, zap and their dependencies). Its users can unmarshal the
// result into an event.Event as is (internal/contracttest checks that the
// SDK reads it and validates it). e must be valid ([Envelope.Validate]).
func ToCloudEvent(e *Envelope, opts *CloudEventOptions) ([]byte, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	data, err := e.Encode()
	if err != nil {
		return nil, err
	}
	var o CloudEventOptions
	if opts != nil {
		o = *opts
	}
	if o.ID == "" {
		sum := sha256.Sum256(data)
		o.ID = hex.EncodeToString(sum[:])
	}
	if o.Source == "" {
		o.Source = "/geodlq"
		if s := e.Source; s != nil {
			o.Source += "/" + url.PathEscape(s.System)
			if s.Topic != "" {
				o.Source += "/" + url.PathEscape(s.Topic)
			}
		}
	} else if _, err := url.Parse(o.Source); err != nil {
		return nil, fmt.Errorf("envelope: CloudEventOptions.Source: %w", err)
	}
	b := make([]byte, 0, len(data)+len(e.IdempotencyKey)+512)
	str := func(key, v string) {
		b = appendKey(b, len(b) > 1, key)
		b = appendString(b, v)
	}
	b = append(b, '{')
	str("specversion", CloudEventSpecVersion)
	str("id", o.ID)
	str("source", o.Source)
	str("type", CloudEventType)
	str("subject", e.EventID)
	str("time", e.DeadLetteredAt.UTC().Format(time.RFC3339Nano))
	str("datacontenttype", "application/json")
	str("dataschema", SchemaID)
	str(ExtClass, e.FailureClass.String())
	str(ExtStage, e.FailedStage.String())
	str(ExtDestination, e.Route.String())
	str(ExtIdempotencyKey, e.IdempotencyKey)
	if e.Attempts <= math.MaxInt32 {
		b = appendKey(b, true, ExtAttempts)
		b = strconv.AppendInt(b, int64(e.Attempts), 10)
	}
	str(ExtFirstSeenAt, e.FirstSeenAt.UTC().Format(time.RFC3339Nano))
	str(ExtPayloadSHA256, e.PayloadSHA256)
	if e.SourceEPSG > 0 && e.SourceEPSG <= math.MaxInt32 {
		b = appendKey(b, true, ExtEPSG)
		b = strconv.AppendInt(b, int64(e.SourceEPSG), 10)
	}
	if o.Base64Data {
		b = appendKey(b, true, "data_base64")
		b = appendBytesAs(b, data, EncodingBase64)
	} else {
		b = appendKey(b, true, "data")
		b = append(b, data...)
	}
	return append(b, '}'), nil
}

// FromCloudEvent reads a dead letter from a CloudEvents 1.0 event in
// structured JSON mode, as [ToCloudEvent] writes it or any CloudEvents
// SDK does: it checks the event against the JSON format (attribute names
// of lower-case letters and digits; specversion "1.0"; id, source and
// type present and non-empty, type [CloudEventType]; attribute values
// that are strings, integers or booleans, null meaning unset; a JSON
// datacontenttype; data or data_base64, not both), decodes the envelope
// from data (or data_base64) with [Decode], and checks that the
// extension attributes it knows agree with the envelope. Other extension
// attributes are ignored.
//
// Errors are a [*CloudEventError] for the event, and Decode's
// [*ValidationError] or [*VersionError] for the envelope it carries.
func FromCloudEvent(data []byte) (*Envelope, error) {
	if !utf8.Valid(data) {
		return nil, ceError("", "not UTF-8 JSON text")
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(data, &members); err != nil {
		return nil, ceError("", "not a JSON object: %v", err)
	}
	attrs := make(map[string]any, len(members))
	for name, raw := range members {
		if name == "data" || name == "data_base64" {
			continue
		}
		if !validAttributeName(name) {
			return nil, ceError(name, "attribute names are lower-case ASCII letters and digits")
		}
		v, err := attributeValue(raw)
		if err != nil {
			return nil, ceError(name, "%v", err)
		}
		if v != nil {
			attrs[name] = v
		}
	}
	str := func(name string, required bool) (string, error) {
		v, ok := attrs[name]
		if !ok {
			if required {
				return "", ceError(name, "required attribute missing")
			}
			return "", nil
		}
		s, ok := v.(string)
		if !ok || required && s == "" {
			return "", ceError(name, "must be a non-empty string")
		}
		return s, nil
	}
	var vals [6]string
	for i, a := range []struct {
		name     string
		required bool
	}{{"specversion", true}, {"id", true}, {"source", true}, {"type", true}, {"datacontenttype", false}, {"dataschema", false}} {
		s, err := str(a.name, a.required)
		if err != nil {
			return nil, err
		}
		vals[i] = s
	}
	specversion, source, typ, contentType, dataschema := vals[0], vals[2], vals[3], vals[4], vals[5]
	if specversion != CloudEventSpecVersion {
		return nil, ceError("specversion", "%q is not %q", specversion, CloudEventSpecVersion)
	}
	if _, err := url.Parse(source); err != nil {
		return nil, ceError("source", "not a URI-reference: %v", err)
	}
	if typ != CloudEventType {
		return nil, ceError("type", "%q is not a geodlq dead letter (%s)", typ, CloudEventType)
	}
	if contentType != "" {
		mt, _, err := mime.ParseMediaType(contentType)
		if err != nil || !(strings.HasSuffix(mt, "/json") || strings.HasSuffix(mt, "+json")) {
			return nil, ceError("datacontenttype", "%q does not declare JSON data", contentType)
		}
	}
	if dataschema != "" {
		if u, err := url.Parse(dataschema); err != nil || !u.IsAbs() {
			return nil, ceError("dataschema", "%q is not an absolute URI", dataschema)
		}
	}
	for _, name := range []string{"subject"} {
		if _, err := str(name, false); err != nil {
			return nil, err
		}
	}
	if t, ok := attrs["time"]; ok {
		s, isStr := t.(string)
		if _, err := time.Parse(time.RFC3339Nano, s); !isStr || err != nil {
			return nil, ceError("time", "not an RFC 3339 timestamp")
		}
	}

	doc, hasData := members["data"]
	b64, hasB64 := members["data_base64"]
	if hasData && string(doc) == "null" {
		hasData = false
	}
	if hasB64 && string(b64) == "null" {
		hasB64 = false
	}
	switch {
	case hasData && hasB64:
		return nil, ceError("data", "data and data_base64 are both present")
	case hasB64:
		var s string
		if err := json.Unmarshal(b64, &s); err != nil {
			return nil, ceError("data_base64", "not a string")
		}
		d, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, ceError("data_base64", "not base64: %v", err)
		}
		doc = d
	case !hasData:
		return nil, ceError("data", "no data: a dead letter carries its envelope")
	}
	e, err := Decode(doc)
	if err != nil {
		return nil, err
	}
	if err := checkExtensions(e, attrs); err != nil {
		return nil, err
	}
	return e, nil
}

// checkExtensions checks that the dead-letter extension attributes that
// are present say what the envelope says.
func checkExtensions(e *Envelope, attrs map[string]any) error {
	want := map[string]any{
		ExtClass: e.FailureClass.String(), ExtStage: e.FailedStage.String(), ExtDestination: e.Route.String(),
		ExtIdempotencyKey: e.IdempotencyKey, ExtAttempts: int64(e.Attempts), ExtPayloadSHA256: e.PayloadSHA256,
		ExtEPSG: int64(e.SourceEPSG),
	}
	for name, w := range want {
		if v, ok := attrs[name]; ok && v != w {
			return ceError(name, "%v contradicts the envelope's %v", v, w)
		}
	}
	if v, ok := attrs[ExtFirstSeenAt]; ok {
		s, _ := v.(string)
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil || !t.Equal(e.FirstSeenAt) {
			return ceError(ExtFirstSeenAt, "%v contradicts the envelope's %v", v, e.FirstSeenAt.Format(time.RFC3339Nano))
		}
	}
	return nil
}

// validAttributeName reports whether name is a CloudEvents attribute
// name: lower-case ASCII letters and digits. (The specification advises
// at most 20 characters; longer names from other producers are read.)
func validAttributeName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// attributeValue decodes an attribute's JSON value: a string, an integer
// (int64, written without fraction or exponent, within CloudEvents'
// 32-bit range), a boolean, or nil for null.
func attributeValue(raw json.RawMessage) (any, error) {
	switch c := raw[0]; {
	case c == 'n':
		return nil, nil
	case c == 't' || c == 'f':
		return c == 't', nil
	case c == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
		return s, nil
	case c == '-' || c >= '0' && c <= '9':
		n, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil || n < math.MinInt32 || n > math.MaxInt32 {
			return nil, fmt.Errorf("%s is not a CloudEvents Integer (no fraction or exponent, 32 bits)", raw)
		}
		return n, nil
	}
	return nil, errors.New("attribute values are strings, integers or booleans")
}
