package console

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/paulmach/orb"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
)

// Query is a selection of records as the API takes it: in the query
// string of GET requests, and as the "filter" object of a job. Class,
// stage, EPSG, reason kind, time range and box go to the store
// (broker.Filter); destination to ListOptions; source prefix and text are
// matched here.
type Query struct {
	// Destination selects one destination; "" every destination.
	Destination string `json:"destination,omitempty"`
	// Classes, Stages, ReasonKinds and EPSG select by the envelope's
	// fields (any one value of each list).
	Classes     []string `json:"class,omitempty"`
	Stages      []string `json:"stage,omitempty"`
	ReasonKinds []string `json:"reason,omitempty"`
	EPSG        []int    `json:"epsg,omitempty"`
	// Since and Until bound dead_lettered_at: RFC 3339 times, or durations
	// ago such as 24h or 7d.
	Since string `json:"since,omitempty"`
	Until string `json:"until,omitempty"`
	// SourcePrefix selects records whose source (the event's value at
	// the console's source pointer, Options.SourcePointer) starts with it.
	SourcePrefix string `json:"source_prefix,omitempty"`
	// Text selects records whose event id, record id, reason, error
	// message or event attributes (its properties, source, name…: every
	// member but the geometry, see broker.Indexed) contain it, compared
	// as broker.SearchFold folds.
	Text string `json:"q,omitempty"`
	// BBox is minx,miny,maxx,maxy: the fault location (in the payload's
	// coordinates) lies inside, the store's box query.
	BBox string `json:"bbox,omitempty"`
	// Replayed includes replayed (acknowledged) records, in stores that
	// keep them.
	Replayed bool `json:"replayed,omitempty"`
}

// selection is a parsed, validated Query.
type selection struct {
	q      Query
	filter broker.Filter
	text   string // folded (broker.SearchFold)
}

// Limits on what a request may ask for.
const (
	maxQueryText   = 256
	maxQueryValues = 64
)

// errBadQuery is wrapped by every error parsing a query.
var errBadQuery = errors.New("bad query")

func badQuery(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errBadQuery}, args...)...)
}

// queryFromURL reads a Query from URL parameters; lists are
// comma-separated or repeated.
func queryFromURL(v url.Values) (Query, error) {
	var q Query
	for name := range v {
		switch name {
		case "destination", "class", "stage", "reason", "epsg", "since", "until", "source_prefix", "q", "bbox", "replayed",
			"cursor", "limit", "sort", "zoom", "view", "download", "method", "bucket":
		default:
			return q, badQuery("unknown parameter %q", name)
		}
	}
	q.Destination = v.Get("destination")
	q.Classes = list(v["class"])
	q.Stages = list(v["stage"])
	q.ReasonKinds = list(v["reason"])
	for _, s := range list(v["epsg"]) {
		n, err := strconv.Atoi(s)
		if err != nil {
			return q, badQuery("epsg %q is not an integer", s)
		}
		q.EPSG = append(q.EPSG, n)
	}
	q.Since, q.Until = v.Get("since"), v.Get("until")
	q.SourcePrefix, q.Text, q.BBox = v.Get("source_prefix"), v.Get("q"), v.Get("bbox")
	switch r := v.Get("replayed"); r {
	case "", "0", "false":
	case "1", "true":
		q.Replayed = true
	default:
		return q, badQuery("replayed %q: want true or false", r)
	}
	return q, nil
}

func list(vs []string) []string {
	var out []string
	for _, v := range vs {
		for p := range strings.SplitSeq(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

// parse validates q into a selection; pointer is the console's source
// pointer ("" for broker.DefaultSourcePointer).
func (q Query) parse(now time.Time, pointer string) (selection, error) {
	s := selection{q: q}
	s.filter.SourcePointer = pointer
	for name, vals := range map[string]int{"class": len(q.Classes), "stage": len(q.Stages), "reason": len(q.ReasonKinds), "epsg": len(q.EPSG)} {
		if vals > maxQueryValues {
			return s, badQuery("%s has %d values (limit %d)", name, vals, maxQueryValues)
		}
	}
	for _, str := range []string{q.Destination, q.Since, q.Until, q.SourcePrefix, q.Text, q.BBox} {
		if len(str) > 1024 || !utf8.ValidString(str) {
			return s, badQuery("a parameter is longer than 1024 bytes or not UTF-8")
		}
	}
	if q.Destination != "" {
		if err := broker.ValidDestination(q.Destination); err != nil {
			return s, badQuery("destination: %v", err)
		}
	}
	for _, c := range q.Classes {
		cl, err := classify.ParseClass(c)
		if err != nil {
			return s, badQuery("unknown class %q (known: %s)", c, strings.Join(classNames(), ", "))
		}
		s.filter.Classes = append(s.filter.Classes, cl)
	}
	for _, st := range q.Stages {
		sg, err := classify.ParseStage(st)
		if err != nil {
			return s, badQuery("unknown stage %q (known: %s)", st, strings.Join(stageNames(), ", "))
		}
		s.filter.Stages = append(s.filter.Stages, sg)
	}
	for _, k := range q.ReasonKinds {
		rk := classify.ReasonKind(k)
		if !rk.Valid() {
			return s, badQuery("unknown reason kind %q (known: %s)", k, strings.Join(kindNames(), ", "))
		}
		s.filter.ReasonKinds = append(s.filter.ReasonKinds, rk)
	}
	s.filter.EPSG = q.EPSG
	var err error
	if s.filter.Since, err = parseWhen(q.Since, now); err != nil {
		return s, badQuery("since: %v", err)
	}
	if s.filter.Until, err = parseWhen(q.Until, now); err != nil {
		return s, badQuery("until: %v", err)
	}
	if q.BBox != "" {
		b, err := parseBBox(q.BBox)
		if err != nil {
			return s, badQuery("bbox: %v", err)
		}
		s.filter.BBox = &b
	}
	if len(q.Text) > maxQueryText {
		return s, badQuery("q is longer than %d bytes", maxQueryText)
	}
	s.text = broker.SearchFold(q.Text)
	if err := s.filter.Validate(); err != nil {
		return s, badQuery("%v", err)
	}
	return s, nil
}

// clientSide reports whether the selection has filters the store does not
// apply.
func (s selection) clientSide() bool { return s.q.SourcePrefix != "" || s.text != "" }

// envelopeOnly reports whether the selection matches envelopes only.
func (s selection) envelopeOnly() bool { return !s.filter.IsZero() || s.clientSide() }

// match applies the client-side filters to a record and its envelope (nil
// when the record is not an envelope).
func (s selection) match(id string, env *envelope.Envelope) bool {
	if !s.clientSide() {
		return true
	}
	if env == nil {
		return false
	}
	x := broker.IndexOfEnvelope(env, 0, nil)
	if s.q.SourcePrefix != "" && !strings.HasPrefix(broker.SourceValue(x.Attrs, s.filter.SourcePointer), s.q.SourcePrefix) {
		return false
	}
	return s.text == "" || strings.Contains(x.Search, s.text) || strings.Contains(broker.SearchFold(id), s.text)
}

func containsFunc[T any](xs []T, f func(T) bool) bool {
	for _, x := range xs {
		if f(x) {
			return true
		}
	}
	return false
}

func classNames() []string {
	var ns []string
	for _, c := range classify.Classes() {
		ns = append(ns, c.String())
	}
	return ns
}

func stageNames() []string {
	var ns []string
	for _, c := range classify.Stages() {
		ns = append(ns, c.String())
	}
	return ns
}

func kindNames() []string {
	var ns []string
	for _, k := range classify.ReasonKinds() {
		ns = append(ns, string(k))
	}
	return ns
}

// parseWhen reads an RFC 3339 time, or a duration ago ("24h", "7d");
// "" is the zero time.
func parseWhen(v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if n, ok := strings.CutSuffix(v, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil || days < 0 || days > 36500 {
			return time.Time{}, fmt.Errorf("bad number of days %q", v)
		}
		return now.Add(-time.Duration(days) * 24 * time.Hour), nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time nor a duration like 24h or 7d", v)
	}
	return now.Add(-d), nil
}

// parseBBox reads minx,miny,maxx,maxy.
func parseBBox(v string) (orb.Bound, error) {
	parts := strings.Split(v, ",")
	if len(parts) != 4 {
		return orb.Bound{}, fmt.Errorf("%q: want minx,miny,maxx,maxy", v)
	}
	var n [4]float64
	for i, p := range parts {
		f, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return orb.Bound{}, fmt.Errorf("%q: %q is not a finite number", v, p)
		}
		n[i] = f
	}
	if n[0] > n[2] || n[1] > n[3] {
		return orb.Bound{}, fmt.Errorf("%q: min is above max", v)
	}
	return orb.Bound{Min: orb.Point{n[0], n[1]}, Max: orb.Point{n[2], n[3]}}, nil
}
