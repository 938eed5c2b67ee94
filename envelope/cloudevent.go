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

// The CloudEvents binding: a dead letter as a CloudEvents 1.0 event, the
// envelope as its data and the fields a router filters on as extension
// attributes; in structured JSON mode ([ToCloudEvent]) or in the binary
// mode of the HTTP and Kafka protocol bindings ([ToCloudEventHTTP],
// [ToCloudEventKafka]).
const (
	// CloudEventType is the type attribute of a dead-letter event.
	CloudEventType = "io.github.geodlq.dlq.v1"
	// CloudEventsMediaType is the media type of an event in structured
	// JSON mode, for the Content-Type of the message that carries it.
	CloudEventsMediaType = "application/cloudevents+json"
	// CloudEventSpecVersion is the CloudEvents version written and read.
	CloudEventSpecVersion = "1.0"
	// CloudEventDataContentType is the datacontenttype of a dead-letter
	// event: JSON (the +json suffix, RFC 6839) of the dlq.v1 type. It is
	// not application/json because CloudEvents SDKs parse data of that
	// type and write it back re-serialised (the JS SDK with
	// JSON.stringify: whitespace dropped, 1.0 written 1, "\u00e9" written
	// "é", integers beyond 2^53 rounded), which breaks the envelope's
	// verbatim payload; they carry data of this type as bytes or text,
	// untouched, and the Go SDK's DataAs still decodes it as JSON.
	// [FromCloudEvent] and the From functions accept any JSON type.
	CloudEventDataContentType = "application/vnd.geodlq.dlq.v1+json"
)

// The extension attributes of a dead-letter event, mirroring the dlq-*
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

// CloudEventOptions configures [ToCloudEvent], [ToCloudEventHTTP] and
// [ToCloudEventKafka]. The zero value (and nil) uses the defaults.
type CloudEventOptions struct {
	// Source is the source attribute, a URI-reference naming where the
	// dead letter comes from. Default: "/geodlq/<system>/<topic>" from the
	// envelope's broker provenance (path-escaped), "/geodlq" without it.
	Source string
	// ID is the id attribute. Default: the hex SHA-256 of the encoded
	// envelope, so that the same dead letter sent twice has the same
	// source and id, and two dead-letterings of one event differ.
	ID string
	// JSONData makes [ToCloudEvent] write the envelope as the JSON value
	// of data, with datacontenttype "application/json", rather than as
	// data_base64 of [CloudEventDataContentType]: for consumers that read
	// JSON data natively. But the envelope embeds its payload verbatim
	// (insignificant whitespace, the spelling of numbers and escapes
	// included), and an intermediary that parses and re-serialises JSON
	// data breaks it (the CloudEvents Go SDK compacts JSON data it writes;
	// the JS SDK re-serialises it with JSON.stringify), which
	// FromCloudEvent then refuses as invalid. Default false: data_base64,
	// which travels through anything. The binary mode carries the envelope
	// as the message body, of [CloudEventDataContentType], either way.
	JSONData bool
}

// ceAttribute is an attribute of a dead-letter event: a String, or an
// Integer when isInt.
type ceAttribute struct {
	name, value string
	isInt       bool
	n           int64
}

// cloudEventOf returns the encoded envelope and the attributes of its
// event, in the order ToCloudEvent writes them.
func cloudEventOf(e *Envelope, opts *CloudEventOptions, contentType string) ([]byte, []ceAttribute, error) {
	if err := e.Validate(); err != nil {
		return nil, nil, err
	}
	data, err := e.Encode()
	if err != nil {
		return nil, nil, err
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
		return nil, nil, fmt.Errorf("envelope: CloudEventOptions.Source: %w", err)
	}
	attrs := []ceAttribute{
		{name: "specversion", value: CloudEventSpecVersion},
		{name: "id", value: o.ID},
		{name: "source", value: o.Source},
		{name: "type", value: CloudEventType},
		{name: "subject", value: e.EventID},
		{name: "time", value: e.DeadLetteredAt.UTC().Format(time.RFC3339Nano)},
		{name: "datacontenttype", value: contentType},
		{name: "dataschema", value: SchemaID},
		{name: ExtClass, value: e.FailureClass.String()},
		{name: ExtStage, value: e.FailedStage.String()},
		{name: ExtDestination, value: e.Route.String()},
		{name: ExtIdempotencyKey, value: e.IdempotencyKey},
	}
	if e.Attempts <= math.MaxInt32 {
		attrs = append(attrs, ceAttribute{name: ExtAttempts, isInt: true, n: int64(e.Attempts)})
	}
	attrs = append(attrs,
		ceAttribute{name: ExtFirstSeenAt, value: e.FirstSeenAt.UTC().Format(time.RFC3339Nano)},
		ceAttribute{name: ExtPayloadSHA256, value: e.PayloadSHA256})
	if e.SourceEPSG > 0 && e.SourceEPSG <= math.MaxInt32 {
		attrs = append(attrs, ceAttribute{name: ExtEPSG, isInt: true, n: int64(e.SourceEPSG)})
	}
	for i := range attrs {
		if attrs[i].isInt {
			attrs[i].value = strconv.FormatInt(attrs[i].n, 10)
		}
	}
	return data, attrs, nil
}

// ToCloudEvent returns e as a CloudEvents 1.0 event in structured JSON
// mode ([CloudEventsMediaType]):
//
//   - specversion "1.0", type [CloudEventType], id and source (see
//     [CloudEventOptions]), subject the event_id, time the
//     dead_lettered_at, datacontenttype [CloudEventDataContentType]
//     ("application/json" with [CloudEventOptions].JSONData) and
//     dataschema [SchemaID];
//   - data_base64 the envelope's encoding, or data the encoding embedded
//     byte for byte as a JSON object (see [CloudEventOptions].JSONData);
//   - the extension attributes [ExtClass], [ExtStage], [ExtDestination],
//     [ExtIdempotencyKey], [ExtAttempts], [ExtFirstSeenAt],
//     [ExtPayloadSHA256] and [ExtEPSG], so that a broker or router can
//     filter dead letters without reading the data.
//
// The binding uses the standard library only: the CloudEvents Go SDK
// would more than double the core module's dependency graph (it brings
// json-iterator, zap and their dependencies). Its users can unmarshal the
// result into an event.Event as is (internal/contracttest checks that the
// Go and JS SDKs read it, validate it and write it back intact). e must be
// valid ([Envelope.Validate]).
func ToCloudEvent(e *Envelope, opts *CloudEventOptions) ([]byte, error) {
	contentType := CloudEventDataContentType
	if opts != nil && opts.JSONData {
		contentType = "application/json"
	}
	data, attrs, err := cloudEventOf(e, opts, contentType)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, base64.StdEncoding.EncodedLen(len(data))+len(e.IdempotencyKey)+512)
	b = append(b, '{')
	for i, a := range attrs {
		b = appendKey(b, i > 0, a.name)
		if a.isInt {
			b = append(b, a.value...)
		} else {
			b = appendString(b, a.value)
		}
	}
	if opts != nil && opts.JSONData {
		b = appendKey(b, true, "data")
		b = append(b, data...)
	} else {
		b = appendKey(b, true, "data_base64")
		b = appendBytesAs(b, data, EncodingBase64)
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
// from data (a JSON object, or a string holding one, as the SDKs write
// data of a type other than application/json) or data_base64 with
// [Decode], and checks that the extension attributes it knows agree with
// the envelope. Other extension attributes are ignored.
//
// An extension attribute agrees when it says what the envelope says, in
// its own type or in the canonical string form the binary mode carries (a
// String percent-decoded once, an Integer in decimal): an SDK converting
// a binary-mode message to structured mode keeps the header's text.
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
		doc = nil
	case doc[0] == '"':
		var s string
		if err := json.Unmarshal(doc, &s); err != nil {
			return nil, ceError("data", "not a JSON string: %v", err)
		}
		doc = []byte(s)
	}
	return readCloudEvent(attrs, doc)
}

// readCloudEvent reads a dead letter from an event's attributes (values
// string, int64 or bool; unset ones absent) and its data (nil: none), in
// either content mode.
func readCloudEvent(attrs map[string]any, doc []byte) (*Envelope, error) {
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
	var vals [7]string
	for i, a := range []struct {
		name     string
		required bool
	}{{"specversion", true}, {"id", true}, {"source", true}, {"type", true}, {"datacontenttype", false}, {"dataschema", false}, {"subject", false}} {
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
	if t, ok := attrs["time"]; ok {
		s, isStr := t.(string)
		if _, err := time.Parse(time.RFC3339Nano, s); !isStr || err != nil {
			return nil, ceError("time", "not an RFC 3339 timestamp")
		}
	}
	if len(doc) == 0 {
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
// are present say what the envelope says (see FromCloudEvent).
func checkExtensions(e *Envelope, attrs map[string]any) error {
	strs := map[string]string{
		ExtClass: e.FailureClass.String(), ExtStage: e.FailedStage.String(), ExtDestination: e.Route.String(),
		ExtIdempotencyKey: e.IdempotencyKey, ExtPayloadSHA256: e.PayloadSHA256,
	}
	for name, w := range strs {
		v, ok := attrs[name]
		if !ok {
			continue
		}
		if s, isStr := v.(string); !isStr || s != w && !percentDecodesTo(s, w) {
			return ceError(name, "%v contradicts the envelope's %v", v, w)
		}
	}
	for name, w := range map[string]int64{ExtAttempts: int64(e.Attempts), ExtEPSG: int64(e.SourceEPSG)} {
		v, ok := attrs[name]
		if !ok {
			continue
		}
		if s, isStr := v.(string); isStr {
			v, _ = ceInteger(s)
		}
		if v != w {
			return ceError(name, "%v contradicts the envelope's %v", attrs[name], w)
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

// percentDecodesTo reports whether s, percent-decoded once, is want.
func percentDecodesTo(s, want string) bool {
	d, err := percentDecode(s)
	return err == nil && d == want
}

// ceInteger parses the canonical string form of a CloudEvents Integer:
// decimal, no leading zeros or plus sign, 32 bits.
func ceInteger(s string) (int64, error) {
	digits := strings.TrimPrefix(s, "-")
	if digits == "" || len(digits) > 1 && digits[0] == '0' || strings.Trim(digits, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a CloudEvents Integer", s)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < math.MinInt32 || n > math.MaxInt32 {
		return 0, fmt.Errorf("%q is not a CloudEvents Integer (decimal, 32 bits)", s)
	}
	return n, nil
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
