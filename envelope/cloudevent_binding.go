package envelope

import (
	"errors"
	"fmt"
	"mime"
	"net/textproto"
	"strings"
	"unicode/utf8"
)

// The binary content mode of the CloudEvents HTTP and Kafka protocol
// bindings (1.0.2): the attributes travel as message headers and the data,
// the envelope's encoding, as the message body, byte for byte.
const (
	// HTTPHeaderPrefix prefixes the attribute headers of an HTTP message
	// in binary mode (header names are case-insensitive).
	HTTPHeaderPrefix = "ce-"
	// KafkaHeaderPrefix prefixes the attribute headers of a Kafka record
	// in binary mode.
	KafkaHeaderPrefix = "ce_"
)

// KafkaHeader is a Kafka record header: the shape of franz-go's
// kgo.RecordHeader, which converts to it and back directly.
type KafkaHeader struct {
	Key   string
	Value []byte
}

// ToCloudEventHTTP writes e as a CloudEvents 1.0 event in the binary
// content mode of the HTTP protocol binding: it sets in header (an
// http.Header, or any header map) Content-Type to the datacontenttype
// ([CloudEventDataContentType]) and one ce-<name> header per other
// attribute (the attributes of [ToCloudEvent], Integers in decimal),
// its value percent-encoded as the binding says (space, '"', '%' and
// every byte outside printable ASCII as %XX); and returns the body, the
// envelope's encoding. The Content-Type and ce-* headers header held
// before are removed, so that the message carries this event only; other
// headers are left alone. e must be valid ([Envelope.Validate]).
//
// For the structured mode, send [ToCloudEvent]'s bytes with Content-Type
// [CloudEventsMediaType]; [FromCloudEventHTTP] reads both.
func ToCloudEventHTTP(e *Envelope, header map[string][]string, opts *CloudEventOptions) ([]byte, error) {
	data, attrs, err := cloudEventOf(e, opts, CloudEventDataContentType)
	if err != nil {
		return nil, err
	}
	for k := range header {
		if lk := strings.ToLower(k); lk == "content-type" || strings.HasPrefix(lk, HTTPHeaderPrefix) {
			delete(header, k)
		}
	}
	for _, a := range attrs {
		if a.name == "datacontenttype" {
			header["Content-Type"] = []string{a.value}
			continue
		}
		header[textproto.CanonicalMIMEHeaderKey(HTTPHeaderPrefix+a.name)] = []string{percentEncode(a.value)}
	}
	return data, nil
}

// ToCloudEventKafka returns e as a CloudEvents 1.0 event in the binary
// content mode of the Kafka protocol binding: the record's headers
// (content-type the datacontenttype, [CloudEventDataContentType]; one
// ce_<name> header per other attribute of [ToCloudEvent], its value the
// attribute's canonical string in UTF-8) and its value, the envelope's
// encoding. The record's key is the caller's (the binding maps the
// producer's key as is). e must be valid ([Envelope.Validate]).
//
// For the structured mode, send [ToCloudEvent]'s bytes with a
// content-type header of [CloudEventsMediaType]; [FromCloudEventKafka]
// reads both.
func ToCloudEventKafka(e *Envelope, opts *CloudEventOptions) ([]KafkaHeader, []byte, error) {
	data, attrs, err := cloudEventOf(e, opts, CloudEventDataContentType)
	if err != nil {
		return nil, nil, err
	}
	headers := make([]KafkaHeader, 0, len(attrs))
	for _, a := range attrs {
		key := KafkaHeaderPrefix + a.name
		if a.name == "datacontenttype" {
			key = "content-type"
		}
		headers = append(headers, KafkaHeader{Key: key, Value: []byte(a.value)})
	}
	return headers, data, nil
}

// FromCloudEventHTTP reads a dead letter from an HTTP message carrying a
// CloudEvents 1.0 event: in structured mode when its Content-Type is
// [CloudEventsMediaType] (the body is then read by [FromCloudEvent]),
// else in binary mode. In binary mode the attributes are the ce-<name>
// headers (names matched case-insensitively; each value unquoted if
// double-quoted and percent-decoded once, which must leave UTF-8),
// datacontenttype is Content-Type (a ce-datacontenttype header is
// refused, as the binding says), and the data is the body. The event is
// then checked as FromCloudEvent checks it: required attributes,
// specversion, type, a JSON datacontenttype, the envelope (Decode), the
// dead-letter extensions against it (dlqattempts and dlqepsg are
// Integers in decimal). An attribute header given twice, other batched
// or structured formats, and attribute names that are not lower-case
// letters and digits are refused. Other headers are ignored.
//
// header is an http.Header, or any header map. Errors are as
// FromCloudEvent's.
func FromCloudEventHTTP(header map[string][]string, body []byte) (*Envelope, error) {
	var contentType string
	seenContentType := false
	attrs := map[string]any{}
	for k, vs := range header {
		lk := strings.ToLower(k)
		isCT := lk == "content-type"
		if !isCT && !strings.HasPrefix(lk, HTTPHeaderPrefix) {
			continue
		}
		if len(vs) != 1 || isCT && seenContentType {
			return nil, ceError(k, "header appears more than once")
		}
		if isCT {
			contentType, seenContentType = vs[0], true
			continue
		}
		name := lk[len(HTTPHeaderPrefix):]
		if err := binaryAttributeName(name); err != nil {
			return nil, ceError(name, "%v", err)
		}
		if _, dup := attrs[name]; dup {
			return nil, ceError(name, "header appears more than once")
		}
		if name == "datacontenttype" {
			return nil, ceError(name, "the HTTP binding carries datacontenttype as Content-Type only")
		}
		v, err := httpHeaderValue(vs[0])
		if err != nil {
			return nil, ceError(name, "%v", err)
		}
		if attrs[name], err = binaryAttributeValue(name, v); err != nil {
			return nil, ceError(name, "%v", err)
		}
	}
	if structured, err := structuredMode(contentType); err != nil {
		return nil, err
	} else if structured {
		return FromCloudEvent(body)
	}
	if seenContentType {
		attrs["datacontenttype"] = strings.TrimSpace(contentType)
	}
	return readCloudEvent(attrs, body)
}

// FromCloudEventKafka reads a dead letter from a Kafka record carrying a
// CloudEvents 1.0 event: in structured mode when its content-type header
// is [CloudEventsMediaType] (the value is then read by [FromCloudEvent]),
// else in binary mode, where the attributes are the ce_<name> headers
// (UTF-8 text), datacontenttype the content-type header (a
// ce_datacontenttype header, which some SDKs add, must agree with it),
// and the data the record's value; then checked as [FromCloudEventHTTP]
// checks an HTTP message. The header names content-type is matched
// case-insensitively, ce_ headers as written; a header given twice is
// refused, other headers are ignored. Errors are as FromCloudEvent's.
func FromCloudEventKafka(headers []KafkaHeader, value []byte) (*Envelope, error) {
	var contentType string
	seenContentType := false
	attrs := map[string]any{}
	for _, h := range headers {
		if strings.EqualFold(h.Key, "content-type") {
			if seenContentType {
				return nil, ceError(h.Key, "header appears more than once")
			}
			if !utf8.Valid(h.Value) {
				return nil, ceError(h.Key, "not UTF-8")
			}
			contentType, seenContentType = string(h.Value), true
			continue
		}
		name, ok := strings.CutPrefix(h.Key, KafkaHeaderPrefix)
		if !ok {
			continue
		}
		if err := binaryAttributeName(name); err != nil {
			return nil, ceError(name, "%v", err)
		}
		if _, dup := attrs[name]; dup {
			return nil, ceError(name, "header appears more than once")
		}
		if !utf8.Valid(h.Value) {
			return nil, ceError(name, "not UTF-8")
		}
		v, err := binaryAttributeValue(name, string(h.Value))
		if err != nil {
			return nil, ceError(name, "%v", err)
		}
		attrs[name] = v
	}
	if structured, err := structuredMode(contentType); err != nil {
		return nil, err
	} else if structured {
		return FromCloudEvent(value)
	}
	if dct, ok := attrs["datacontenttype"]; ok && seenContentType && dct != contentType {
		return nil, ceError("datacontenttype", "ce_datacontenttype %q contradicts content-type %q", dct, contentType)
	}
	if seenContentType {
		attrs["datacontenttype"] = contentType
	}
	return readCloudEvent(attrs, value)
}

// structuredMode reports whether a message's content type says it holds
// an event in a structured format: the JSON format is read, others (a
// batch, Avro, Protobuf) are refused.
func structuredMode(contentType string) (bool, error) {
	if contentType == "" {
		return false, nil
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		// Not a structured event; as datacontenttype it is refused below.
		return false, nil
	}
	if !strings.HasPrefix(mt, "application/cloudevents") {
		return false, nil
	}
	if mt != CloudEventsMediaType {
		return false, ceError("", "%s: only a single event in the JSON format (%s) is read", mt, CloudEventsMediaType)
	}
	return true, nil
}

// binaryAttributeName checks the name of an attribute header.
func binaryAttributeName(name string) error {
	if name == "data" || name == "data_base64" || !validAttributeName(name) {
		return errBadAttributeName
	}
	return nil
}

var errBadAttributeName = errors.New("attribute names are lower-case ASCII letters and digits, not data")

// binaryAttributeValue types a header's text: the dead-letter extensions
// that are Integers become int64, every other attribute stays a string
// (the headers do not say an unknown extension's type).
func binaryAttributeValue(name, v string) (any, error) {
	if name == ExtAttempts || name == ExtEPSG {
		n, err := ceInteger(v)
		if err != nil {
			return nil, err
		}
		return n, nil
	}
	return v, nil
}

// percentEncode encodes an attribute's value for an HTTP header as the
// HTTP binding (1.0.2, 3.1.3.2) says: space, '"', '%' and every byte
// outside U+0021-U+007E of the UTF-8 encoding become %XX, upper case.
func percentEncode(s string) string {
	const hexDigits = "0123456789ABCDEF"
	n := 0
	for i := 0; i < len(s); i++ {
		if mustPercentEncode(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	b := make([]byte, 0, len(s)+2*n)
	for i := 0; i < len(s); i++ {
		if c := s[i]; mustPercentEncode(c) {
			b = append(b, '%', hexDigits[c>>4], hexDigits[c&15])
		} else {
			b = append(b, c)
		}
	}
	return string(b)
}

func mustPercentEncode(c byte) bool { return c <= ' ' || c == '"' || c == '%' || c >= 0x7f }

// httpHeaderValue decodes an attribute header's value as the HTTP binding
// says: double-quoted strings unquoted (RFC 7230 3.2.6, backslash escapes
// included), then one round of percent-decoding (either case), whose
// result must be UTF-8.
func httpHeaderValue(v string) (string, error) {
	v = strings.Trim(v, " \t")
	if strings.IndexByte(v, '"') >= 0 {
		var b strings.Builder
		quoted := false
		for i := 0; i < len(v); i++ {
			switch c := v[i]; {
			case c == '"':
				quoted = !quoted
			case c == '\\' && quoted:
				if i++; i == len(v) {
					return "", errBadQuoting
				}
				b.WriteByte(v[i])
			default:
				b.WriteByte(c)
			}
		}
		if quoted {
			return "", errBadQuoting
		}
		v = b.String()
	}
	return percentDecode(v)
}

var errBadQuoting = errors.New("unterminated double-quoted string")

// percentDecode decodes %XX sequences once; a '%' not followed by two
// hex digits, or a result that is not UTF-8, is an error.
func percentDecode(s string) (string, error) {
	if strings.IndexByte(s, '%') < 0 {
		if !utf8.ValidString(s) {
			return "", errNotUTF8
		}
		return s, nil
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b = append(b, s[i])
			continue
		}
		if i+2 >= len(s) || unhex(s[i+1]) < 0 || unhex(s[i+2]) < 0 {
			return "", fmt.Errorf("%q has a '%%' that is not a %%XX escape", s)
		}
		b = append(b, byte(unhex(s[i+1])<<4|unhex(s[i+2])))
		i += 2
	}
	if !utf8.Valid(b) {
		return "", errNotUTF8
	}
	return string(b), nil
}

var errNotUTF8 = errors.New("percent-decoded, not UTF-8")

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}
