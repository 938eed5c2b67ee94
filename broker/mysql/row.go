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
}

func (r *row) args() []any {
	return []any{r.destination, r.key, r.headers, r.binaryHeaders, r.body, r.isEnvelope,
		r.eventID, r.idemKey, r.class, r.stage, r.epsg, r.kind, r.deadUS, r.deadNS,
		r.locX, r.locY, r.geometryURI, r.rawURI}
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
	if env, err := broker.EnvelopeOf(m); err == nil && fits(env.EventID, maxEventID) && fits(env.IdempotencyKey, maxIdemKey) &&
		fits(string(env.FailureClass), maxClass) && fits(string(env.FailedStage), maxClass) &&
		fits(env.Geometry.OffloadURI, maxURI) && fits(env.RawPayloadOffloadURI, maxURI) &&
		(env.GeometryError == nil || fits(env.GeometryError.Kind, maxKind)) {
		r.isEnvelope = true
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
