package broker

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/jsonscan"
)

// Summary is what a listing shows of a record without reading its body:
// the fields of the envelope that an operator's table shows, sorts and
// groups by. A store computes it once, when the record is written, and
// keeps it beside the body, so that a page of summaries costs the same
// whatever the size of its records (see [ListOptions.Summaries]).
type Summary struct {
	// Envelope is true when the body is a dlq.v1 envelope; every other
	// field but ReplayOf and BodyBytes is then set from it, and is zero
	// otherwise.
	Envelope bool `json:"envelope"`
	// EventID is the envelope's event id.
	EventID string `json:"event_id,omitempty"`
	// Class, Stage and ReasonKind are the failure class, the failed stage
	// and the geometry error's reason kind.
	Class      classify.Class      `json:"failure_class,omitempty"`
	Stage      classify.Stage      `json:"failed_stage,omitempty"`
	ReasonKind classify.ReasonKind `json:"reason_kind,omitempty"`
	// Reason is the geometry error's reason, else the error message, cut
	// to [MaxSummaryText] bytes (on a character boundary, ending in "…").
	Reason string `json:"reason,omitempty"`
	// EPSG is [EPSGOf] the envelope.
	EPSG int `json:"epsg,omitempty"`
	// GeometryType, VertexCount and GeometryBytes describe the geometry,
	// inline or offloaded.
	GeometryType  string `json:"geometry_type,omitempty"`
	VertexCount   int    `json:"vertex_count,omitempty"`
	GeometryBytes int64  `json:"geometry_bytes,omitempty"`
	// GeometryOffloadURI and PayloadOffloadURI are the blobs the envelope
	// references (geometry.offload_uri, raw_payload_offload_uri), when
	// offloaded.
	GeometryOffloadURI string `json:"geometry_offload_uri,omitempty"`
	PayloadOffloadURI  string `json:"payload_offload_uri,omitempty"`
	// PayloadBytes is the original payload's size.
	PayloadBytes int64 `json:"payload_bytes,omitempty"`
	// Attempts is how many times the event was tried.
	Attempts int `json:"attempts,omitempty"`
	// DeadLetteredAt is when the envelope was built.
	DeadLetteredAt time.Time `json:"dead_lettered_at,omitzero"`
	// Location and Fault locate the geometry error, when known.
	Location []float64       `json:"location,omitempty"`
	Fault    *classify.Fault `json:"fault,omitempty"`
	// Source is the event's source: its value at the filter's
	// SourcePointer (see [Filter.SourcePointer], [SourceValue]). Stores
	// fill it in when they list; it is not kept with the rest.
	Source string `json:"-"`
	// ReplayOf is the dlq-replay-of header ([HeaderReplayOf]): set, the
	// record is an event a replay re-injected into this store, not a dead
	// letter.
	ReplayOf string `json:"replay_of,omitempty"`
	// BodyBytes is the size of the record's body.
	BodyBytes int64 `json:"body_bytes"`
}

// Summary and search limits.
const (
	// MaxSummaryText bounds Summary.Reason, and every value of an event's
	// attributes (see [Indexed]), in bytes.
	MaxSummaryText = 512
	// MaxAttrsBytes bounds [Indexed.Attrs]: an event's attributes past it
	// are not kept (they can be neither searched nor grouped by).
	MaxAttrsBytes = 4096
	// MaxSearchText bounds [Filter.Text], in bytes.
	MaxSearchText = 256
	// MaxSourcePointer bounds [Filter.SourcePointer], in bytes.
	MaxSourcePointer = 256
	// maxAttrDepth bounds how deep into the event's objects and arrays
	// the attributes go.
	maxAttrDepth = 6
	// maxAttrArray bounds the elements of one array the attributes keep.
	maxAttrArray = 32
	// maxSearchError bounds the error message kept for the text search.
	maxSearchError = 1024
)

// DefaultSourcePointer is the source of an event when
// Filter.SourcePointer is empty: its top-level source_uri member.
const DefaultSourcePointer = "/source_uri"

// Indexed is what a store keeps beside a record's body, computed once by
// [IndexOf] when the record is written, so that it lists, sorts, searches
// and groups records without reading their bodies.
type Indexed struct {
	// Summary is the record's summary, without Source.
	Summary Summary
	// Attrs are the event's scalar members, one line each, "\n" + JSON
	// pointer + "\t" + value, ending in "\n" (see [SourceValue]): every
	// member but its geometry ("geometry", "geometries", "coordinates"
	// and "bbox" members at any depth), up to [MaxAttrsBytes] in all.
	// Strings are unquoted, numbers and booleans written as in the event,
	// nulls left out; control characters read as spaces and invalid UTF-8
	// as U+FFFD; values are cut to [MaxSummaryText] bytes. "\n" alone for
	// a record without attributes.
	Attrs string
	// Search is the text [Filter.Text] searches, lower-cased: the event
	// id, the reason, the error message (its first 1 KiB) and the
	// attributes' values, one per line.
	Search string
}

// IndexOf computes what a store keeps beside m's body. m.Envelope is used
// when set; otherwise the body is decoded. A body that is not a dlq.v1
// envelope yields a summary with Envelope false.
func IndexOf(m *Message) Indexed {
	x := Indexed{Attrs: "\n"}
	if m == nil {
		return x
	}
	x.Summary.BodyBytes = int64(len(m.Body))
	x.Summary.ReplayOf = clipText(m.Header(HeaderReplayOf), MaxSummaryText)
	env, err := EnvelopeOf(m)
	if err != nil {
		return x
	}
	return indexEnvelope(env, x)
}

// IndexOfEnvelope is [IndexOf] for a decoded envelope whose body has
// bodyBytes bytes and whose message headers are headers (nil: none).
func IndexOfEnvelope(env *envelope.Envelope, bodyBytes int64, headers map[string]string) Indexed {
	x := Indexed{Attrs: "\n"}
	x.Summary.BodyBytes = bodyBytes
	x.Summary.ReplayOf = clipText(headers[HeaderReplayOf], MaxSummaryText)
	if env == nil {
		return x
	}
	return indexEnvelope(env, x)
}

func indexEnvelope(env *envelope.Envelope, x Indexed) Indexed {
	s := &x.Summary
	s.Envelope = true
	s.EventID, s.Class, s.Stage = env.EventID, env.FailureClass, env.FailedStage
	s.EPSG = EPSGOf(env)
	s.GeometryType, s.VertexCount, s.GeometryBytes = env.GeometryType, env.VertexCount, env.Geometry.ByteSize
	s.GeometryOffloadURI, s.PayloadOffloadURI = env.Geometry.OffloadURI, env.RawPayloadOffloadURI
	s.PayloadBytes, s.Attempts, s.DeadLetteredAt = env.PayloadSize, env.Attempts, env.DeadLetteredAt.UTC()
	reason := env.ErrorMessage
	if ge := env.GeometryError; ge != nil {
		s.ReasonKind = classify.ReasonKind(ge.Kind)
		if ge.Reason != "" {
			reason = ge.Reason
		}
		if len(ge.Location) == 2 && !math.IsNaN(ge.Location[0]) && !math.IsNaN(ge.Location[1]) &&
			!math.IsInf(ge.Location[0], 0) && !math.IsInf(ge.Location[1], 0) {
			s.Location = []float64{ge.Location[0], ge.Location[1]}
		}
		if ge.Fault != nil {
			f := *ge.Fault
			s.Fault = &f
		}
	}
	s.Reason = clipText(reason, MaxSummaryText)
	x.Attrs = attrsOf(env)
	var b strings.Builder
	b.WriteString(env.EventID)
	b.WriteByte('\n')
	if ge := env.GeometryError; ge != nil {
		b.WriteString(clipText(ge.Reason, maxSearchError))
	}
	b.WriteByte('\n')
	b.WriteString(clipText(env.ErrorMessage, maxSearchError))
	b.WriteByte('\n')
	for line := range strings.SplitSeq(x.Attrs[1:], "\n") {
		if _, v, ok := strings.Cut(line, "\t"); ok {
			b.WriteString(v)
			b.WriteByte('\n')
		}
	}
	x.Search = SearchFold(b.String())
	return x
}

// SearchFold is how [Filter.Text] and [Indexed.Search] compare text:
// lower-cased (Unicode simple folding to lower case), control characters
// as spaces, invalid UTF-8 as U+FFFD. Stores compare Filter.Text folded so
// with Indexed.Search byte for byte.
func SearchFold(s string) string {
	return strings.ToLower(cleanText(s))
}

// cleanText replaces invalid UTF-8 with U+FFFD and control characters
// (C0, DEL) with spaces, so that the text fits any store's text column
// and the attribute lines' separators.
func cleanText(s string) string {
	clean := utf8.ValidString(s)
	for i := 0; clean && i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			clean = false
		}
	}
	if clean {
		return s
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}

// clipText cleans s (see cleanText) and cuts it to at most n bytes on a
// character boundary, ending in "…" when cut.
func clipText(s string, n int) string {
	s = cleanText(s)
	if len(s) <= n {
		return s
	}
	const ellipsis = "…"
	n -= len(ellipsis)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + ellipsis
}

// SourceValue returns the value of the attribute at pointer in attrs (an
// [Indexed.Attrs]), or "" when attrs has none there (the member is
// missing, null, an object or an array, or was past the limit). It is
// the event's source when pointer is Filter.SourcePointer.
func SourceValue(attrs, pointer string) string {
	if pointer == "" {
		pointer = DefaultSourcePointer
	}
	needle := "\n" + pointer + "\t"
	i := strings.Index(attrs, needle)
	if i < 0 {
		return ""
	}
	rest := attrs[i+len(needle):]
	if j := strings.IndexByte(rest, '\n'); j >= 0 {
		return rest[:j]
	}
	return rest
}

// SourceOf returns env's source: its raw payload's value at pointer ("" is
// [DefaultSourcePointer]), exactly as the stores index it and [Filter],
// stats and the console read it (SourceValue over the attributes
// [IndexOfEnvelope] gives). It is the one reading of an event's source:
// a payload that is not quite JSON (a bare NaN or Infinity coordinate) is
// read up to where it breaks, a number is its text, a duplicated member's
// first value counts, members deeper than the attributes' bound are not
// read, and an offloaded payload has none ("").
func SourceOf(env *envelope.Envelope, pointer string) string {
	if env == nil {
		return ""
	}
	return SourceValue(attrsOf(env), pointer)
}

// SourceGroup cuts a source value to its first depth parts, the way
// [StatsOptions.SourceDepth] groups sources: parts are separated by "/",
// and a URI's "scheme://host" is its first part ("s3://provider-b/2026/x"
// is "s3://provider-b" at depth 1, "s3://provider-b/2026" at depth 2).
// depth <= 0 returns v whole.
func SourceGroup(v string, depth int) string {
	if depth <= 0 {
		return v
	}
	n := depth // the slash before which v is cut
	if strings.Contains(v, "://") {
		n += 2
	}
	for i := 0; i < len(v); i++ {
		if v[i] == '/' {
			n--
			if n == 0 {
				return v[:i]
			}
		}
	}
	return v
}

// ValidSourcePointer reports whether p can name an event's source: "" (the
// default, [DefaultSourcePointer]) or a JSON pointer (RFC 6901) of 1 to
// [MaxSourcePointer] bytes of valid UTF-8 without control characters, at
// most 6 levels deep. Errors wrap [ErrInvalidArgument].
func ValidSourcePointer(p string) error {
	if p == "" {
		return nil
	}
	switch {
	case len(p) > MaxSourcePointer:
		return fmt.Errorf("source pointer of %d bytes (limit %d): %w", len(p), MaxSourcePointer, ErrInvalidArgument)
	case !strings.HasPrefix(p, "/"):
		return fmt.Errorf("source pointer %q: a JSON pointer starts with \"/\" (/source_uri, /properties/provider): %w", p, ErrInvalidArgument)
	case !utf8.ValidString(p) || cleanText(p) != p:
		return fmt.Errorf("source pointer %q holds invalid UTF-8 or a control character: %w", p, ErrInvalidArgument)
	case strings.Count(p, "/") > maxAttrDepth:
		return fmt.Errorf("source pointer %q is deeper than %d levels: %w", p, maxAttrDepth, ErrInvalidArgument)
	}
	if _, err := jsonscan.Compile(p); err != nil {
		return fmt.Errorf("source pointer %q: a \"~\" must be followed by 0 or 1: %w", p, ErrInvalidArgument)
	}
	return nil
}

// excludedAttr reports whether a member is left out of the attributes:
// the geometry and the arrays of coordinates that make it.
func excludedAttr(key string) bool {
	switch key {
	case "geometry", "geometries", "coordinates", "bbox":
		return true
	}
	return false
}

// attrsOf flattens env's raw payload (see [Indexed.Attrs]). It reads the
// payload's structure with jsonscan, skipping the geometry without
// decoding it, and stops at the first malformed byte, keeping what it
// read before; jsonscan reads NaN and Infinity as numbers, so an event
// that is not JSON only for a NaN coordinate keeps its attributes.
func attrsOf(env *envelope.Envelope) string {
	p := env.RawPayload // whatever its encoding: a payload that is not quite JSON (a bare NaN) is read up to where it breaks
	if len(p) == 0 {
		return "\n"
	}
	w := attrWalker{out: []byte{'\n'}}
	i := skipSpace(p, 0)
	if i < len(p) && p[i] == '{' {
		_ = w.object(p, i, nil, 0)
	}
	return string(w.out)
}

type attrWalker struct{ out []byte }

// errAttrsFull ends a walk once the attributes reach MaxAttrsBytes.
var errAttrsFull = errors.New("attributes full")

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// object walks the object at data[i] (a '{'), whose pointer is ptr.
func (w *attrWalker) object(data []byte, i int, ptr []byte, depth int) error {
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return nil
	}
	for i < len(data) {
		ks, ke, err := jsonscan.Skip(data, i)
		if err != nil || data[ks] != '"' {
			return fmt.Errorf("attributes: a member name at %d", ks)
		}
		key, err := jsonscan.Unquote(data[ks:ke])
		if err != nil {
			return err
		}
		i = skipSpace(data, ke)
		if i >= len(data) || data[i] != ':' {
			return fmt.Errorf("attributes: a ':' at %d", i)
		}
		vs, ve, err := jsonscan.Skip(data, i+1)
		if err != nil {
			return err
		}
		if !excludedAttr(key) {
			if err := w.value(data, vs, ve, appendToken(ptr, key), depth); err != nil {
				return err
			}
		}
		i = skipSpace(data, ve)
		if i < len(data) && data[i] == ',' {
			i = skipSpace(data, i+1)
			continue
		}
		return nil
	}
	return nil
}

// array walks the array at data[i] (a '[').
func (w *attrWalker) array(data []byte, i int, ptr []byte, depth int) error {
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == ']' {
		return nil
	}
	for n := 0; i < len(data) && n < maxAttrArray; n++ {
		vs, ve, err := jsonscan.Skip(data, i)
		if err != nil {
			return err
		}
		if err := w.value(data, vs, ve, appendToken(ptr, strconv.Itoa(n)), depth); err != nil {
			return err
		}
		i = skipSpace(data, ve)
		if i < len(data) && data[i] == ',' {
			i = skipSpace(data, i+1)
			continue
		}
		return nil
	}
	return nil
}

// value adds the value data[vs:ve] at ptr: a scalar as a line, an object
// or array walked (up to maxAttrDepth).
func (w *attrWalker) value(data []byte, vs, ve int, ptr []byte, depth int) error {
	var v string
	switch c := data[vs]; {
	case c == '{':
		if depth+1 >= maxAttrDepth {
			return nil
		}
		return w.object(data, vs, ptr, depth+1)
	case c == '[':
		if depth+1 >= maxAttrDepth {
			return nil
		}
		return w.array(data, vs, ptr, depth+1)
	case c == 'n':
		return nil // null: no value
	case c == '"':
		s, err := jsonscan.Unquote(data[vs:ve])
		if err != nil {
			return err
		}
		v = s
	default:
		v = string(data[vs:ve])
	}
	v = clipText(v, MaxSummaryText)
	if len(w.out)+len(ptr)+len(v)+2 > MaxAttrsBytes {
		return errAttrsFull
	}
	w.out = append(w.out, ptr...)
	w.out = append(w.out, '\t')
	w.out = append(w.out, v...)
	w.out = append(w.out, '\n')
	return nil
}

// appendToken returns ptr + "/" + the escaped token (RFC 6901: "~" as
// "~0", "/" as "~1"), cleaned of control characters, in a new slice.
func appendToken(ptr []byte, tok string) []byte {
	out := make([]byte, 0, len(ptr)+len(tok)+1)
	out = append(out, ptr...)
	out = append(out, '/')
	tok = cleanText(tok)
	for i := 0; i < len(tok); i++ {
		switch tok[i] {
		case '~':
			out = append(out, '~', '0')
		case '/':
			out = append(out, '~', '1')
		default:
			out = append(out, tok[i])
		}
	}
	return out
}

// SummaryOf returns the summary of a listed record: e.Summary when the
// store set it, else computed from the record's message. pointer is the
// filter's SourcePointer.
func SummaryOf(r *Record, pointer string) Summary {
	if r == nil || r.Message == nil {
		return Summary{}
	}
	var x Indexed
	if r.Envelope != nil {
		x = IndexOfEnvelope(r.Envelope, int64(len(r.Message.Body)), r.Message.Headers)
	} else {
		x = IndexOf(r.Message)
	}
	x.Summary.Source = SourceValue(x.Attrs, pointer)
	return x.Summary
}

// MaxSourceDepth bounds [StatsOptions.SourceDepth].
const MaxSourceDepth = 16
