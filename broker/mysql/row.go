package mysql

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/envelope"
)

// row is a message turned into the insert's parameters; nil is NULL.
type row struct {
	destination         string
	key                 any
	headers             []byte
	binaryHeaders       any
	body                []byte
	isEnvelope          bool
	eventID, idemKey    any
	class, stage, kind  any
	epsg                any
	deadUS, deadNS      any
	locX, locY          any
	geometryURI, rawURI any
	size                int
	ix                  indexCols
}

func (r *row) args() []any {
	return []any{r.destination, r.key, r.headers, r.binaryHeaders, r.body, r.isEnvelope,
		r.eventID, r.idemKey, r.class, r.stage, r.epsg, r.kind, r.deadUS, r.deadNS,
		r.locX, r.locY, r.geometryURI, r.rawURI,
		r.ix.vertices, r.ix.geomBytes, r.ix.attempts, r.ix.nanos, r.ix.source, r.ix.summary, r.ix.attrs}
}

// indexCols are the columns of broker.IndexOf (schema version 2); search
// goes to the search table.
type indexCols struct {
	vertices, attempts int64
	geomBytes, nanos   int64
	source             any // []byte or nil
	summary, attrs     []byte
	search             []byte
}

// maxSource is the size of the source column.
const maxSource = 512

// indexOf computes m's index columns; env is m's envelope (nil: not one).
func indexOf(m *broker.Message, env *envelope.Envelope) indexCols {
	var x broker.Indexed
	if env == nil {
		x = broker.IndexOf(&broker.Message{Body: m.Body, Headers: m.Headers})
	} else {
		x = broker.IndexOfEnvelope(env, int64(len(m.Body)), m.Headers)
	}
	sum, _ := json.Marshal(x.Summary) // a Summary always encodes
	c := indexCols{vertices: int64(x.Summary.VertexCount), attempts: int64(x.Summary.Attempts), geomBytes: x.Summary.GeometryBytes,
		nanos: broker.SortValue(&x.Summary, broker.SortDeadLetteredAt), summary: sum, attrs: []byte(x.Attrs), search: []byte(x.Search)}
	if env != nil {
		if src := broker.SourceValue(x.Attrs, broker.DefaultSourcePointer); src != "" && len(src) <= maxSource {
			c.source = []byte(src)
		}
	}
	return c
}

// Column sizes of the triage columns (see migrations). An envelope whose
// fields exceed them (envelope.Decode's limits keep every valid one under)
// is stored as a body that is not an envelope.
const (
	maxEventID = 4096
	maxIdemKey = 16<<20 - 1
	maxClass   = 64
	maxKind    = 256
	maxURI     = 8192
)

// prepare maps m to a row, and refuses a row max_allowed_packet cannot
// carry. The body limit itself is the portable store's check.
func (d *driver) prepare(destination string, m *broker.Message) (*row, error) {
	r := &row{destination: destination, body: m.Body}
	if r.body == nil {
		r.body = []byte{}
	}
	if m.Key != nil {
		r.key = m.Key
	}
	clean, binary, err := encodeHeaders(m.Headers)
	if err != nil {
		return nil, err
	}
	r.headers = clean
	if binary != nil {
		r.binaryHeaders = binary
	}
	r.size = len(r.body) + len(m.Key) + len(clean) + len(binary) + len(destination)
	r.ix = indexOf(m, nil)
	if env, err := broker.EnvelopeOf(m); err == nil && fits(env.EventID, maxEventID) && fits(env.IdempotencyKey, maxIdemKey) &&
		fits(string(env.FailureClass), maxClass) && fits(string(env.FailedStage), maxClass) &&
		fits(env.Geometry.OffloadURI, maxURI) && fits(env.RawPayloadOffloadURI, maxURI) &&
		(env.GeometryError == nil || fits(env.GeometryError.Kind, maxKind)) {
		r.isEnvelope = true
		r.ix = indexOf(m, env)
		r.eventID, r.idemKey = []byte(env.EventID), []byte(env.IdempotencyKey)
		r.class, r.stage = []byte(env.FailureClass), []byte(env.FailedStage)
		r.epsg = int64(broker.EPSGOf(env))
		at := env.DeadLetteredAt
		r.deadUS, r.deadNS = at.UnixMicro(), int64(at.Nanosecond()%1000)
		if ge := env.GeometryError; ge != nil {
			r.kind = []byte(ge.Kind)
			if len(ge.Location) == 2 && finite(ge.Location[0]) && finite(ge.Location[1]) {
				r.locX, r.locY = ge.Location[0], ge.Location[1]
			}
		}
		if u := env.Geometry.OffloadURI; u != "" {
			r.geometryURI = []byte(u)
		}
		if u := env.RawPayloadOffloadURI; u != "" {
			r.rawURI = []byte(u)
		}
		r.size += len(env.EventID) + len(env.IdempotencyKey) + len(env.Geometry.OffloadURI) + len(env.RawPayloadOffloadURI)
	}
	r.size += len(r.ix.summary) + len(r.ix.attrs)
	if r.size > d.packet-rowOverhead {
		return nil, d.tooLarge(destination, r.size)
	}
	return r, nil
}

func fits(s string, n int) bool { return len(s) <= n }

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// encodeHeaders splits headers into a JSON object of those whose key and
// value are valid UTF-8 and, when any is not, a JSON array of base64
// [key, value] pairs for the others, so every header survives byte for
// byte (JSON would replace invalid UTF-8).
func encodeHeaders(h map[string]string) (clean, binary []byte, err error) {
	text := make(map[string]string, len(h))
	var pairs [][2]string
	for k, v := range h {
		if utf8.ValidString(k) && utf8.ValidString(v) {
			text[k] = v
			continue
		}
		pairs = append(pairs, [2]string{base64.StdEncoding.EncodeToString([]byte(k)), base64.StdEncoding.EncodeToString([]byte(v))})
	}
	if clean, err = json.Marshal(text); err != nil {
		return nil, nil, fmt.Errorf("mysql: encoding headers: %w", err)
	}
	if len(pairs) == 0 {
		return clean, nil, nil
	}
	slices.SortFunc(pairs, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	if binary, err = json.Marshal(pairs); err != nil {
		return nil, nil, fmt.Errorf("mysql: encoding headers: %w", err)
	}
	return clean, binary, nil
}

func decodeHeaders(clean, binary []byte) (map[string]string, error) {
	var h map[string]string
	if len(clean) > 0 {
		if err := json.Unmarshal(clean, &h); err != nil {
			return nil, fmt.Errorf("headers: %w", err)
		}
	}
	if len(binary) == 0 {
		return h, nil
	}
	var pairs [][2]string
	if err := json.Unmarshal(binary, &pairs); err != nil {
		return nil, fmt.Errorf("binary headers: %w", err)
	}
	if h == nil {
		h = make(map[string]string, len(pairs))
	}
	for _, p := range pairs {
		k, err := base64.StdEncoding.DecodeString(p[0])
		if err != nil {
			return nil, fmt.Errorf("binary header key: %w", err)
		}
		v, err := base64.StdEncoding.DecodeString(p[1])
		if err != nil {
			return nil, fmt.Errorf("binary header value: %w", err)
		}
		h[string(k)] = string(v)
	}
	return h, nil
}
