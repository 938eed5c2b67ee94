package broker

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/paulmach/orb"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
)

// Filter selects dead-lettered records. Zero fields match everything; a
// record must match every non-zero field (and any one value within a
// field). Every field but IDs is a property of the envelope, so a
// non-zero filter other than IDs matches only records whose body is a
// dlq.v1 envelope.
type Filter struct {
	// IDs selects records by record id (see [Record.ID]).
	IDs []string
	// EventIDs selects by event id.
	EventIDs []string
	// Classes selects by failure class.
	Classes []classify.Class
	// Stages selects by failed stage.
	Stages []classify.Stage
	// ReasonKinds selects by the geometry error's reason kind.
	ReasonKinds []classify.ReasonKind
	// EPSG selects by the EPSG code recorded for the payload's CRS (the
	// geometry error's EPSG for a CRS mismatch, else source_epsg; see
	// [EPSGOf]).
	EPSG []int
	// Since and Until bound dead_lettered_at: Since <= t < Until.
	Since, Until time.Time
	// BBox selects records whose geometry error location lies inside the
	// bound, when set. Records without a location do not match.
	BBox *orb.Bound
	// Text selects records whose event id, geometry error reason, error
	// message or event attributes (the event's members but its geometry:
	// its properties, source, name… see [Indexed.Attrs]) contain Text,
	// compared folded to lower case ([SearchFold]). At most
	// [MaxSearchText] bytes.
	Text string
	// SourcePointer is the JSON pointer (RFC 6901) into the event that
	// names its source: "/provider", "/properties/source". Default
	// [DefaultSourcePointer]. It selects nothing by itself: it says where
	// Sources and SourcePrefix look, and which value listings report as
	// Summary.Source and Stats groups by (see [SourceValue]).
	SourcePointer string
	// Sources selects records whose source (the event's value at
	// SourcePointer) is one of these.
	Sources []string
	// SourcePrefix selects records whose source starts with it
	// ("s3://provider-b/").
	SourcePrefix string
}

// MaxFilterValues bounds each list of a [Filter], so that a filter from
// an untrusted request cannot make a store build an unbounded query.
const MaxFilterValues = 1000

// Validate reports a filter no store can apply: a list over
// [MaxFilterValues], an invalid class, stage or EPSG code, Since after
// Until, or a bounding box that is not finite or whose min exceeds its
// max. Errors wrap [ErrInvalidArgument].
func (f Filter) Validate() error {
	for name, n := range map[string]int{"IDs": len(f.IDs), "EventIDs": len(f.EventIDs), "Classes": len(f.Classes),
		"Stages": len(f.Stages), "ReasonKinds": len(f.ReasonKinds), "EPSG": len(f.EPSG), "Sources": len(f.Sources)} {
		if n > MaxFilterValues {
			return fmt.Errorf("filter %s has %d values (limit %d): %w", name, n, MaxFilterValues, ErrInvalidArgument)
		}
	}
	for _, c := range f.Classes {
		if !c.Valid() {
			return fmt.Errorf("filter: unknown failure class %q: %w", string(c), ErrInvalidArgument)
		}
	}
	for _, s := range f.Stages {
		if !s.Valid() {
			return fmt.Errorf("filter: unknown stage %q: %w", string(s), ErrInvalidArgument)
		}
	}
	for _, k := range f.ReasonKinds {
		if !k.Valid() {
			return fmt.Errorf("filter: unknown reason kind %q: %w", string(k), ErrInvalidArgument)
		}
	}
	for _, e := range f.EPSG {
		if e < 0 || e > math.MaxInt32 {
			return fmt.Errorf("filter: EPSG code %d out of range: %w", e, ErrInvalidArgument)
		}
	}
	if len(f.Text) > MaxSearchText || !utf8.ValidString(f.Text) {
		return fmt.Errorf("filter: text must be at most %d bytes of UTF-8: %w", MaxSearchText, ErrInvalidArgument)
	}
	if err := ValidSourcePointer(f.SourcePointer); err != nil {
		return fmt.Errorf("filter: %w", err)
	}
	for _, v := range append(slices.Clip(f.Sources), f.SourcePrefix) {
		if len(v) > MaxSummaryText || !utf8.ValidString(v) {
			return fmt.Errorf("filter: a source must be at most %d bytes of UTF-8: %w", MaxSummaryText, ErrInvalidArgument)
		}
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && f.Until.Before(f.Since) {
		return fmt.Errorf("filter: until %s is before since %s: %w", f.Until.Format(time.RFC3339), f.Since.Format(time.RFC3339), ErrInvalidArgument)
	}
	if b := f.BBox; b != nil {
		for _, v := range []float64{b.Min[0], b.Min[1], b.Max[0], b.Max[1]} {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("filter: bounding box %v is not finite: %w", *b, ErrInvalidArgument)
			}
		}
		if b.Min[0] > b.Max[0] || b.Min[1] > b.Max[1] {
			return fmt.Errorf("filter: bounding box min %v exceeds max %v: %w", b.Min, b.Max, ErrInvalidArgument)
		}
	}
	return nil
}

// IsZero reports whether f matches every record (SourcePointer alone
// selects nothing).
func (f Filter) IsZero() bool {
	return len(f.IDs) == 0 && len(f.EventIDs) == 0 && len(f.Classes) == 0 && len(f.Stages) == 0 &&
		len(f.ReasonKinds) == 0 && len(f.EPSG) == 0 && f.Since.IsZero() && f.Until.IsZero() && f.BBox == nil &&
		f.Text == "" && len(f.Sources) == 0 && f.SourcePrefix == ""
}

// HasAttrFields reports whether f selects by text or source: fields a
// store applies to the attributes and search text it keeps ([Indexed]).
func (f Filter) HasAttrFields() bool {
	return f.Text != "" || len(f.Sources) > 0 || f.SourcePrefix != ""
}

// envelopeFields reports whether f has a field other than IDs.
func (f Filter) envelopeFields() bool {
	g := f
	g.IDs = nil
	return !g.IsZero()
}

// EPSGOf returns the EPSG code a filter compares: the geometry error's EPSG
// for a CRS mismatch when present, else the envelope's source_epsg.
func EPSGOf(e *envelope.Envelope) int {
	if e.GeometryError != nil && e.GeometryError.EPSG != nil && *e.GeometryError.EPSG != 0 {
		return *e.GeometryError.EPSG
	}
	return e.SourceEPSG
}

// MatchRecord reports whether r satisfies f: its id (IDs), and its
// envelope for every other field (r.Envelope when set, else the message
// body decoded). Adapters that cannot filter in the store filter with it;
// the portable [Store] applies it to every record a driver returns.
func (f Filter) MatchRecord(r *Record) bool {
	if r == nil {
		return false
	}
	if len(f.IDs) > 0 && !slices.Contains(f.IDs, r.ID) {
		return false
	}
	if !f.envelopeFields() {
		return true
	}
	e := r.Envelope
	if e == nil {
		var err error
		if e, err = EnvelopeOf(r.Message); err != nil {
			return false
		}
	}
	return f.Match(e)
}

// Match reports whether envelope e satisfies every field of f but IDs
// (which need the record: see [Filter.MatchRecord]).
func (f Filter) Match(e *envelope.Envelope) bool {
	if e == nil {
		return false
	}
	if len(f.Classes) > 0 && !slices.Contains(f.Classes, e.FailureClass) {
		return false
	}
	if len(f.Stages) > 0 && !slices.Contains(f.Stages, e.FailedStage) {
		return false
	}
	if len(f.ReasonKinds) > 0 {
		if e.GeometryError == nil || !slices.Contains(f.ReasonKinds, classify.ReasonKind(e.GeometryError.Kind)) {
			return false
		}
	}
	if len(f.EPSG) > 0 && !slices.Contains(f.EPSG, EPSGOf(e)) {
		return false
	}
	if !f.Since.IsZero() && e.DeadLetteredAt.Before(f.Since) {
		return false
	}
	if !f.Until.IsZero() && !e.DeadLetteredAt.Before(f.Until) {
		return false
	}
	if len(f.EventIDs) > 0 && !slices.Contains(f.EventIDs, e.EventID) {
		return false
	}
	if f.BBox != nil {
		if e.GeometryError == nil || len(e.GeometryError.Location) != 2 {
			return false
		}
		if !f.BBox.Contains(orb.Point{e.GeometryError.Location[0], e.GeometryError.Location[1]}) {
			return false
		}
	}
	if f.HasAttrFields() {
		return f.MatchIndexed(IndexOfEnvelope(e, 0, nil))
	}
	return true
}

// MatchIndexed applies the text and source fields of f (see
// [Filter.HasAttrFields]) to what a store keeps of a record; it is true
// when f has none of them.
func (f Filter) MatchIndexed(x Indexed) bool {
	if !f.HasAttrFields() {
		return true
	}
	if !x.Summary.Envelope {
		return false
	}
	if f.Text != "" && !strings.Contains(x.Search, SearchFold(f.Text)) {
		return false
	}
	if len(f.Sources) > 0 || f.SourcePrefix != "" {
		src := SourceValue(x.Attrs, f.SourcePointer)
		if len(f.Sources) > 0 && !slices.Contains(f.Sources, src) {
			return false
		}
		if !strings.HasPrefix(src, f.SourcePrefix) {
			return false
		}
	}
	return true
}
