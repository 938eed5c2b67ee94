package envelope

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/internal/jsonscan"
)

// The encodings of raw_payload and geometry.inline on the wire.
const (
	// EncodingJSON embeds the bytes verbatim as a JSON value. It applies to
	// bytes that are a valid JSON document, valid UTF-8, with no leading or
	// trailing whitespace. It is the default and is omitted on the wire.
	EncodingJSON = "json"
	// EncodingString writes the bytes as a JSON string; decoding the string
	// yields the identical bytes. It applies to any valid UTF-8.
	EncodingString = "string"
	// EncodingBase64 writes the bytes as a standard, padded base64 string.
	// It applies to anything.
	EncodingBase64 = "base64"
)

// ChooseEncoding returns the most readable encoding that restores b byte
// for byte: [EncodingJSON] for a JSON document in valid UTF-8 without
// surrounding whitespace, else [EncodingString] for valid UTF-8, else
// [EncodingBase64]. The bare tokens NaN and Infinity make a document
// invalid JSON, so such payloads travel as strings.
//
// A string is chosen only when its escapes at most double its size:
// control characters are written as six-byte \u escapes, so a payload of
// NUL bytes would otherwise travel at six times its size (and cost that
// much to store and decode), where base64 costs a third more.
//
// A document nested deeper than [MaxEmbedDepth] levels also travels as a
// string: embedded in an envelope (and the envelope in a CloudEvent) it
// would exceed the 10,000 levels that Decode and every common JSON reader
// accept.
func ChooseEncoding(b []byte) string {
	if !utf8.Valid(b) {
		return EncodingBase64
	}
	if isJSON(b) && !deeperThan(b, MaxEmbedDepth) {
		return EncodingJSON
	}
	if stringLen(b) > 2*len(b) {
		return EncodingBase64
	}
	return EncodingString
}

// isJSON reports whether b is one JSON document with no surrounding white
// space, which restores byte for byte when embedded.
func isJSON(b []byte) bool {
	return len(b) > 0 && !isWS(b[0]) && !isWS(b[len(b)-1]) && json.Valid(b)
}

// MaxEmbedDepth is the deepest nesting of a payload or geometry that an
// envelope embeds as JSON. Decode accepts envelopes nested up to 10,000
// levels (encoding/json's limit); geometry.inline sits two levels down and
// a CloudEvent's data one more, so embedded documents stop well short.
const MaxEmbedDepth = 9990

// deeperThan reports whether the valid JSON document b nests arrays and
// objects more than limit levels deep. Such a document has more than
// 2*limit bytes, so shorter ones are not scanned.
func deeperThan(b []byte, limit int) bool {
	if len(b) <= 2*limit {
		return false
	}
	depth := 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '[', '{':
			if depth++; depth > limit {
				return true
			}
		case ']', '}':
			depth--
		case '"':
			// Skip the string; b is valid JSON, so it is terminated.
			for i++; b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		}
	}
	return false
}

// stringLen is the length of valid UTF-8 b written by appendString,
// without its quotes.
func stringLen(b []byte) int {
	n := len(b)
	for _, c := range b {
		switch {
		case c >= 0x20 && c != '"' && c != '\\':
		case c == '"', c == '\\', c == '\n', c == '\r', c == '\t':
			n++
		default:
			n += 5
		}
	}
	return n
}

func isWS(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// applicable reports whether enc restores b exactly.
func applicable(enc string, b []byte) bool {
	switch enc {
	case EncodingBase64:
		return true
	case EncodingString:
		return utf8.Valid(b)
	case EncodingJSON:
		// Depth is Decode's own limit to enforce: an envelope embedding a
		// document deeper than MaxEmbedDepth as JSON, and still within
		// 10,000 levels, is valid (ChooseEncoding just never writes one).
		return utf8.Valid(b) && isJSON(b)
	}
	return false
}

// appendBytesAs appends b in encoding enc.
func appendBytesAs(dst, b []byte, enc string) []byte {
	switch enc {
	case EncodingJSON:
		return append(dst, b...)
	case EncodingString:
		return appendString(dst, b)
	default:
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, b)
		return append(dst, '"')
	}
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string. Only '"', '\\' and control
// characters are escaped, so decoding gives back exactly s when s is valid
// UTF-8; invalid bytes are written as U+FFFD (as encoding/json does), so
// the output is always valid JSON.
func appendString[T string | []byte](dst []byte, s T) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			if size := validRuneLen(s, i); size > 0 {
				i += size
				continue
			}
			dst = append(dst, s[start:i]...)
			dst = append(dst, "\ufffd"...)
			i++
			start = i
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		i++
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// validRuneLen returns the length of the valid UTF-8 sequence starting at
// s[i] (a byte >= 0x80), or 0 if it is not one. It follows the rules of
// unicode/utf8: no overlong forms, no surrogates, nothing above U+10FFFF.
func validRuneLen[T string | []byte](s T, i int) int {
	cont := func(b byte) bool { return b&0xC0 == 0x80 }
	c, n := s[i], len(s)-i
	switch {
	case c < 0xC2:
		return 0
	case c < 0xE0:
		if n >= 2 && cont(s[i+1]) {
			return 2
		}
	case c < 0xF0:
		if n >= 3 && cont(s[i+1]) && cont(s[i+2]) &&
			(c != 0xE0 || s[i+1] >= 0xA0) && (c != 0xED || s[i+1] < 0xA0) {
			return 3
		}
	case c < 0xF5:
		if n >= 4 && cont(s[i+1]) && cont(s[i+2]) && cont(s[i+3]) &&
			(c != 0xF0 || s[i+1] >= 0x90) && (c != 0xF4 || s[i+1] < 0x90) {
			return 4
		}
	}
	return 0
}

func appendKey(dst []byte, comma bool, key string) []byte {
	if comma {
		dst = append(dst, ',')
	}
	dst = append(dst, '"')
	dst = append(dst, key...)
	return append(dst, '"', ':')
}

func appendTime(dst []byte, t time.Time) []byte {
	dst = append(dst, '"')
	dst = t.AppendFormat(dst, time.RFC3339Nano)
	return append(dst, '"')
}

func appendFloat(dst []byte, f float64) []byte {
	return strconv.AppendFloat(dst, f, 'g', -1, 64)
}

// Encode returns the envelope in the dlq.v1 wire format. The output is
// canonical: fields in a fixed order, no insignificant whitespace, and
// raw_payload last. raw_payload and geometry.inline are written by hand in
// the encoding their fields name (chosen with [ChooseEncoding] when
// empty), never through encoding/json, which would compact, HTML-escape or
// repair them. For any x produced by Encode, Encode(Decode(x)) == x byte
// for byte.
//
// Encode checks only what it needs to produce valid JSON (an applicable
// encoding, finite numbers, times within years 0–9999); call
// [Envelope.Validate] for the full rules.
func (e *Envelope) Encode() ([]byte, error) {
	return e.appendTo(make([]byte, 0, e.sizeHint()), true)
}

// encodeTrusted encodes an envelope whose encodings Build chose itself,
// skipping the applicability checks (a second json.Valid pass).
func (e *Envelope) encodeTrusted() ([]byte, error) {
	return e.appendTo(make([]byte, 0, e.sizeHint()), false)
}

func (e *Envelope) sizeHint() int {
	n := 768 + len(e.ErrorMessage) + len(e.EventID) + len(e.IdempotencyKey) + len(e.SourceCRS)
	if e.GeometryError != nil {
		n += len(e.GeometryError.Reason)
	}
	grow := func(b []byte, enc string) int {
		switch enc {
		case EncodingBase64:
			return base64.StdEncoding.EncodedLen(len(b))
		case EncodingJSON:
			return len(b)
		case EncodingString:
			return stringLen(b) + 2
		}
		return len(b) + len(b)/16
	}
	return n + grow(e.RawPayload, e.RawPayloadEncoding) + grow(e.Geometry.Inline, e.Geometry.InlineEncoding)
}

func (e *Envelope) appendTo(b []byte, check bool) ([]byte, error) {
	rawEnc, inlineEnc := e.RawPayloadEncoding, e.Geometry.InlineEncoding
	if check || rawEnc == "" || inlineEnc == "" {
		var err error
		if e.RawPayloadOffloadURI == "" {
			if rawEnc, err = encodingFor("raw_payload", rawEnc, e.RawPayload); err != nil {
				return nil, err
			}
		}
		if e.Geometry.OffloadURI == "" {
			if inlineEnc, err = encodingFor("geometry.inline", inlineEnc, e.Geometry.Inline); err != nil {
				return nil, err
			}
		}
	}
	for _, t := range []struct {
		name string
		t    time.Time
	}{{"first_seen_at", e.FirstSeenAt}, {"dead_lettered_at", e.DeadLetteredAt}} {
		if y := t.t.Year(); y < 0 || y > 9999 {
			return nil, fmt.Errorf("envelope: encode: %s year %d outside 0–9999", t.name, y)
		}
	}
	b = append(b, '{')
	b = appendKey(b, false, "schema_version")
	b = appendString(b, e.SchemaVersion)
	b = appendKey(b, true, "event_id")
	b = appendString(b, e.EventID)
	b = appendKey(b, true, "idempotency_key")
	b = appendString(b, e.IdempotencyKey)
	if e.IdempotencyKeyDerived {
		b = appendKey(b, true, "idempotency_key_derived")
		b = append(b, "true"...)
	}
	b = appendKey(b, true, "failure_class")
	b = appendString(b, e.FailureClass.String())
	b = appendKey(b, true, "failed_stage")
	b = appendString(b, e.FailedStage.String())
	b = appendKey(b, true, "destination")
	b = appendString(b, string(e.Route))
	b = appendKey(b, true, "error_message")
	b = appendString(b, e.ErrorMessage)
	if ge := e.GeometryError; ge != nil {
		b = appendKey(b, true, "geometry_error")
		b = appendKey(append(b, '{'), false, "reason")
		b = appendString(b, ge.Reason)
		if ge.Kind != "" {
			b = appendKey(b, true, "kind")
			b = appendString(b, ge.Kind)
		}
		if ge.Location != nil {
			b = appendKey(b, true, "location")
			b = append(b, '[')
			for i, f := range ge.Location {
				if math.IsNaN(f) || math.IsInf(f, 0) {
					return nil, errors.New("envelope: encode: geometry_error.location is not finite")
				}
				if i > 0 {
					b = append(b, ',')
				}
				b = appendFloat(b, f)
			}
			b = append(b, ']')
		}
		if ge.EPSG != nil {
			b = appendKey(b, true, "epsg")
			b = strconv.AppendInt(b, int64(*ge.EPSG), 10)
		}
		if f := ge.Fault; f != nil {
			b = appendKey(b, true, "fault")
			b = appendKey(append(b, '{'), false, "part")
			b = strconv.AppendInt(b, int64(f.Part), 10)
			b = appendKey(b, true, "ring")
			b = strconv.AppendInt(b, int64(f.Ring), 10)
			b = appendKey(b, true, "vertex")
			b = strconv.AppendInt(b, int64(f.Vertex), 10)
			if f.OnSegment {
				b = appendKey(b, true, "on_segment")
				b = append(b, "true"...)
			}
			b = append(b, '}')
		}
		b = append(b, '}')
	}
	b = appendKey(b, true, "source_crs")
	b = appendString(b, e.SourceCRS)
	if e.SourceEPSG != 0 {
		b = appendKey(b, true, "source_epsg")
		b = strconv.AppendInt(b, int64(e.SourceEPSG), 10)
	}

	g := &e.Geometry
	b = appendKey(b, true, "geometry")
	b = append(b, '{')
	if g.OffloadURI != "" {
		b = appendKey(b, false, "offload_uri")
		b = appendString(b, g.OffloadURI)
	} else {
		b = appendKey(b, false, "inline")
		b = appendBytesAs(b, g.Inline, inlineEnc)
		if inlineEnc != EncodingJSON {
			b = appendKey(b, true, "inline_encoding")
			b = appendString(b, inlineEnc)
		}
	}
	b = appendKey(b, true, "byte_size")
	b = strconv.AppendInt(b, g.ByteSize, 10)
	b = appendKey(b, true, "content_sha256")
	b = appendString(b, g.ContentSHA256)
	b = appendKey(b, true, "payload_offset")
	b = strconv.AppendInt(b, g.PayloadOffset, 10)
	if g.Missing {
		b = appendKey(b, true, "missing")
		b = append(b, "true"...)
	}
	b = append(b, '}')
	if e.GeometryType != "" {
		b = appendKey(b, true, "geometry_type")
		b = appendString(b, e.GeometryType)
	}
	if e.VertexCount != 0 {
		b = appendKey(b, true, "vertex_count")
		b = strconv.AppendInt(b, int64(e.VertexCount), 10)
	}
	b = appendKey(b, true, "payload_sha256")
	b = appendString(b, e.PayloadSHA256)
	b = appendKey(b, true, "payload_size")
	b = strconv.AppendInt(b, e.PayloadSize, 10)
	b = appendKey(b, true, "attempts")
	b = strconv.AppendInt(b, int64(e.Attempts), 10)
	b = appendKey(b, true, "first_seen_at")
	b = appendTime(b, e.FirstSeenAt)
	b = appendKey(b, true, "dead_lettered_at")
	b = appendTime(b, e.DeadLetteredAt)
	if e.TraceID != "" {
		b = appendKey(b, true, "trace_id")
		b = appendString(b, e.TraceID)
	}
	if s := e.Source; s != nil {
		b = appendKey(b, true, "source")
		var err error
		if b, err = appendSource(b, s); err != nil {
			return nil, err
		}
	}
	if e.RawPayloadOffloadURI != "" {
		b = appendKey(b, true, "raw_payload_offload_uri")
		b = appendString(b, e.RawPayloadOffloadURI)
	} else {
		if rawEnc != EncodingJSON {
			b = appendKey(b, true, "raw_payload_encoding")
			b = appendString(b, rawEnc)
		}
		b = appendKey(b, true, "raw_payload")
		b = appendBytesAs(b, e.RawPayload, rawEnc)
	}
	return append(b, '}'), nil
}

func encodingFor(field, enc string, b []byte) (string, error) {
	if enc == "" {
		return ChooseEncoding(b), nil
	}
	if !applicable(enc, b) {
		return "", fmt.Errorf("envelope: encode: %s: encoding %q cannot carry these bytes exactly", field, enc)
	}
	return enc, nil
}

// verbatim is a value as it is written in the document Decode reads: a
// sub-slice of the input, not a copy (encoding/json hands an Unmarshaler
// the bytes of its value in the input, and does not modify them). It is
// valid only while Decode runs, which copies what it keeps.
type verbatim []byte

// UnmarshalJSON keeps b, which is null for a JSON null.
func (v *verbatim) UnmarshalJSON(b []byte) error {
	*v = b
	return nil
}

// wire is the decoding form of an envelope: names as on the wire, classes
// and stages as strings (so that bad values become field violations), and
// the two verbatim values as raw JSON.
type wire struct {
	SchemaVersion         string         `json:"schema_version"`
	EventID               string         `json:"event_id"`
	IdempotencyKey        string         `json:"idempotency_key"`
	IdempotencyKeyDerived bool           `json:"idempotency_key_derived"`
	FailureClass          string         `json:"failure_class"`
	FailedStage           string         `json:"failed_stage"`
	Destination           string         `json:"destination"`
	ErrorMessage          string         `json:"error_message"`
	GeometryError         *GeometryError `json:"geometry_error"`
	SourceCRS             string         `json:"source_crs"`
	SourceEPSG            int            `json:"source_epsg"`
	Geometry              wireGeometry   `json:"geometry"`
	GeometryType          string         `json:"geometry_type"`
	VertexCount           int            `json:"vertex_count"`
	PayloadSHA256         string         `json:"payload_sha256"`
	PayloadSize           int64          `json:"payload_size"`
	Attempts              int            `json:"attempts"`
	FirstSeenAt           time.Time      `json:"first_seen_at"`
	DeadLetteredAt        time.Time      `json:"dead_lettered_at"`
	TraceID               string         `json:"trace_id"`
	Source                *Source        `json:"source"`
	RawPayloadOffloadURI  string         `json:"raw_payload_offload_uri"`
	RawPayloadEncoding    string         `json:"raw_payload_encoding"`
	RawPayload            verbatim       `json:"raw_payload"`
}

type wireGeometry struct {
	Inline         verbatim `json:"inline"`
	InlineEncoding string   `json:"inline_encoding"`
	OffloadURI     string   `json:"offload_uri"`
	ByteSize       int64    `json:"byte_size"`
	ContentSHA256  string   `json:"content_sha256"`
	PayloadOffset  *int64   `json:"payload_offset"`
	Missing        bool     `json:"missing"`
}

// Decode parses a dlq.v1 envelope and validates it. A document whose
// schema_version is missing or not "dlq.v1" yields a [*VersionError]
// (wrapping [ErrUnsupportedVersion]); anything else wrong — malformed
// JSON, wrong types, bad values, broken rules — a [*ValidationError]
// (wrapping [ErrInvalid]) listing every violation found. raw_payload and
// geometry.inline are recovered byte for byte. Decode never panics.
func Decode(data []byte) (*Envelope, error) {
	if i := firstNonSpace(data); i >= len(data) || data[i] != '{' {
		return nil, invalid(violation("", "json", "not a JSON object"))
	}
	s, end, err := jsonscan.Find(data, "/schema_version")
	switch {
	case errors.Is(err, jsonscan.ErrNotFound):
		if !json.Valid(data) {
			return nil, invalid(violation("", "json", "not a JSON object"))
		}
		return nil, &VersionError{}
	case err != nil:
		return nil, invalid(violation("", "json", "malformed JSON: "+err.Error()))
	}
	version, err := jsonscan.Unquote(data[s:end])
	if err != nil {
		return nil, invalid(violation("schema_version", "string", "schema_version is not a string"))
	}
	if version != SchemaVersion {
		return nil, &VersionError{Version: version}
	}
	// What encoding/json would hide from the rules: see checkWire.
	if vs, ok := checkWire(data); ok && len(vs) > 0 {
		return nil, invalid(vs...)
	}
	var w wire
	if err := json.Unmarshal(data, &w); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, invalid(violation(te.Field, "type", fmt.Sprintf("%s must be a JSON %s, not %s", te.Field, te.Type, te.Value)))
		}
		return nil, invalid(violation("", "json", "malformed envelope: "+err.Error()))
	}
	e := &Envelope{
		SchemaVersion:         w.SchemaVersion,
		EventID:               w.EventID,
		IdempotencyKey:        w.IdempotencyKey,
		IdempotencyKeyDerived: w.IdempotencyKeyDerived,
		Route:                 classify.Route(w.Destination),
		ErrorMessage:          w.ErrorMessage,
		GeometryError:         w.GeometryError,
		SourceCRS:             w.SourceCRS,
		SourceEPSG:            w.SourceEPSG,
		GeometryType:          w.GeometryType,
		VertexCount:           w.VertexCount,
		PayloadSHA256:         w.PayloadSHA256,
		PayloadSize:           w.PayloadSize,
		Attempts:              w.Attempts,
		FirstSeenAt:           w.FirstSeenAt,
		DeadLetteredAt:        w.DeadLetteredAt,
		TraceID:               w.TraceID,
		Source:                w.Source,
		RawPayloadOffloadURI:  w.RawPayloadOffloadURI,
		RawPayloadEncoding:    w.RawPayloadEncoding,
		Geometry: GeometryRef{
			InlineEncoding: w.Geometry.InlineEncoding,
			OffloadURI:     w.Geometry.OffloadURI,
			ByteSize:       w.Geometry.ByteSize,
			ContentSHA256:  w.Geometry.ContentSHA256,
			PayloadOffset:  -1,
			Missing:        w.Geometry.Missing,
		},
	}
	var vs []Violation
	if w.Geometry.PayloadOffset == nil {
		vs = append(vs, violation("geometry.payload_offset", "required", "geometry.payload_offset is required"))
	} else {
		e.Geometry.PayloadOffset = *w.Geometry.PayloadOffset
	}
	if e.FailureClass, err = classify.ParseClass(w.FailureClass); err != nil {
		vs = append(vs, violation("failure_class", "oneof", fmt.Sprintf("failure_class %q is not a failure class", w.FailureClass)))
	}
	if e.FailedStage, err = classify.ParseStage(w.FailedStage); err != nil {
		vs = append(vs, violation("failed_stage", "oneof", fmt.Sprintf("failed_stage %q is not a pipeline stage", w.FailedStage)))
	}
	if w.RawPayload != nil {
		p, v := decodeBytes("raw_payload", w.RawPayload, w.RawPayloadEncoding)
		e.RawPayload = p
		if e.RawPayloadEncoding == "" {
			e.RawPayloadEncoding = EncodingJSON
		}
		vs = append(vs, v...)
	} else if w.RawPayloadOffloadURI == "" {
		vs = append(vs, violation("raw_payload", "required", "raw_payload is required unless raw_payload_offload_uri is set"))
	}
	if w.Geometry.Inline != nil {
		g, v := decodeBytes("geometry.inline", w.Geometry.Inline, w.Geometry.InlineEncoding)
		e.Geometry.Inline = g
		if e.Geometry.InlineEncoding == "" {
			e.Geometry.InlineEncoding = EncodingJSON
		}
		if g == nil {
			e.Geometry.Inline = []byte{}
		}
		vs = append(vs, v...)
	}
	if err := e.validate(vs); err != nil {
		return nil, err
	}
	return e, nil
}

// decodeBytes recovers the bytes of a verbatim value in the named
// encoding ("" meaning json).
func decodeBytes(field string, raw verbatim, enc string) ([]byte, []Violation) {
	switch enc {
	case "", EncodingJSON:
		return bytes.Clone(raw), nil
	case EncodingString:
		if len(raw) == 0 || raw[0] != '"' {
			return nil, []Violation{violation(field, "type", field+" must be a JSON string for encoding \"string\"")}
		}
		// Decoded straight into the result (as encoding/json decodes a
		// string, which FuzzUnquote holds jsonscan to), sized by the bytes
		// in hand: one copy, not a string and then a copy of it.
		b, err := jsonscan.AppendUnquote(make([]byte, 0, len(raw)), raw)
		if err != nil {
			return nil, []Violation{violation(field, "string", field+": "+err.Error())}
		}
		return b, nil
	case EncodingBase64:
		var b []byte
		if len(raw) == 0 || raw[0] != '"' {
			return nil, []Violation{violation(field, "type", field+" must be a base64 string")}
		}
		if err := json.Unmarshal(raw, &b); err != nil {
			return nil, []Violation{violation(field, "base64", field+": "+err.Error())}
		}
		if b == nil {
			b = []byte{}
		}
		return b, nil
	}
	return nil, []Violation{violation(field+"_encoding", "oneof", fmt.Sprintf("encoding %q is not json, string or base64", enc))}
}

func firstNonSpace(b []byte) int {
	i := 0
	for i < len(b) && isWS(b[i]) {
		i++
	}
	return i
}

// appendSource writes s with the field names and omitempty rules of its
// json tags.
func appendSource(b []byte, s *Source) ([]byte, error) {
	b = appendKey(append(b, '{'), false, "system")
	b = appendString(b, s.System)
	str := func(key, v string) {
		if v != "" {
			b = appendKey(b, true, key)
			b = appendString(b, v)
		}
	}
	str("topic", s.Topic)
	if s.Partition != nil {
		b = appendKey(b, true, "partition")
		b = strconv.AppendInt(b, int64(*s.Partition), 10)
	}
	if s.Offset != nil {
		b = appendKey(b, true, "offset")
		b = strconv.AppendInt(b, *s.Offset, 10)
	}
	str("message_id", s.MessageID)
	if len(s.Key) > 0 {
		b = appendKey(b, true, "key")
		b = appendBytesAs(b, s.Key, EncodingBase64)
	}
	str("group_id", s.GroupID)
	str("dedup_id", s.DedupID)
	if s.DeliveryCount != 0 {
		b = appendKey(b, true, "delivery_count")
		b = strconv.AppendInt(b, int64(s.DeliveryCount), 10)
	}
	if s.Timestamp != nil {
		if y := s.Timestamp.Year(); y < 0 || y > 9999 {
			return nil, fmt.Errorf("envelope: encode: source.timestamp year %d outside 0–9999", y)
		}
		b = appendKey(b, true, "timestamp")
		b = appendTime(b, *s.Timestamp)
	}
	return append(b, '}'), nil
}
