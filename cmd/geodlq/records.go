package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/paulmach/orb"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/geojson"
)

// filterFlags are the record filters list, stats, export, replay, triage,
// verify and purge share. Every one but the source prefix goes to the
// store (broker.Filter); the source prefix is applied here.
type filterFlags struct {
	classes, stages, reasons []string
	ids, events              []string
	epsg                     []int
	since, until             string
	sourcePrefix             string
	sourcePointer            string
	text                     string
	bbox                     string
	all                      bool
}

func (f *filterFlags) register(fs *pflag.FlagSet, replayedFlag bool) {
	fs.StringSliceVar(&f.classes, "class", nil, "failure classes: "+strings.Join(classNames(), ", "))
	fs.StringSliceVar(&f.stages, "stage", nil, "failed stages: "+strings.Join(stageNames(), ", "))
	fs.IntSliceVar(&f.epsg, "epsg", nil, "EPSG codes of the payload's CRS (0: unknown or unparseable)")
	fs.StringSliceVar(&f.reasons, "reason", nil, "reason kinds: "+strings.Join(reasonNames(), ", "))
	fs.StringSliceVar(&f.ids, "id", nil, "record ids")
	fs.StringSliceVar(&f.events, "event", nil, "event ids")
	fs.StringVar(&f.since, "since", "", "dead-lettered at or after: RFC 3339 time, or a duration ago (24h, 7d)")
	fs.StringVar(&f.until, "until", "", "dead-lettered before: RFC 3339 time, or a duration ago")
	fs.StringVar(&f.sourcePrefix, "source-prefix", "", "the event's source (see --source-pointer) starts with this (s3://provider-b/)")
	fs.StringVar(&f.sourcePointer, "source-pointer", "", "JSON pointer to the event's source, for --source-prefix and grouping (default /source_uri; /properties/provider)")
	fs.StringVar(&f.text, "text", "", "the event id, reason, error or any of the event's properties contains this (case-insensitive: --text sudan)")
	fs.StringVar(&f.bbox, "bbox", "", "geometry error location inside minx,miny,maxx,maxy (payload coordinates)")
	if replayedFlag {
		fs.BoolVar(&f.all, "all", false, "include replayed (acknowledged) records")
	}
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
	for _, s := range classify.Stages() {
		ns = append(ns, s.String())
	}
	return ns
}

func reasonNames() []string {
	var ns []string
	for _, k := range classify.ReasonKinds() {
		ns = append(ns, string(k))
	}
	return ns
}

// selection is a parsed filterFlags.
type selection struct {
	filter       broker.Filter
	sourcePrefix string
	replayed     bool
}

// parse validates every filter of cmd: a value no store knows is a usage
// error that names the known ones and points to cmd's help.
func (f *filterFlags) parse(cmd *cobra.Command, now time.Time) (selection, error) {
	s := selection{sourcePrefix: f.sourcePrefix, replayed: f.all}
	if err := checkSourcePointer(f.sourcePointer); err != nil {
		return s, usageFor(cmd, "%v", err)
	}
	s.filter.SourcePointer, s.filter.SourcePrefix, s.filter.Text = f.sourcePointer, f.sourcePrefix, f.text
	for _, c := range f.classes {
		cl, err := classify.ParseClass(c)
		if err != nil {
			return s, usageFor(cmd, "--class %q: want one of %s", c, strings.Join(classNames(), ", "))
		}
		s.filter.Classes = append(s.filter.Classes, cl)
	}
	for _, st := range f.stages {
		sg, err := classify.ParseStage(st)
		if err != nil {
			return s, usageFor(cmd, "--stage %q: want one of %s", st, strings.Join(stageNames(), ", "))
		}
		s.filter.Stages = append(s.filter.Stages, sg)
	}
	for _, r := range f.reasons {
		k, err := classify.ParseReasonKind(r)
		if err != nil {
			return s, usageFor(cmd, "--reason %q: want one of %s", r, strings.Join(reasonNames(), ", "))
		}
		s.filter.ReasonKinds = append(s.filter.ReasonKinds, k)
	}
	for _, id := range f.ids {
		if id == "" {
			return s, usageFor(cmd, "--id: empty record id")
		}
	}
	for _, id := range f.events {
		if id == "" {
			return s, usageFor(cmd, "--event: empty event id")
		}
	}
	s.filter.IDs, s.filter.EventIDs = f.ids, f.events
	s.filter.EPSG = f.epsg
	var err error
	if s.filter.Since, err = parseWhen(f.since, now); err != nil {
		return s, usageFor(cmd, "--since: %v", err)
	}
	if s.filter.Until, err = parseWhen(f.until, now); err != nil {
		return s, usageFor(cmd, "--until: %v", err)
	}
	if f.bbox != "" {
		b, err := parseBBox(f.bbox)
		if err != nil {
			return s, usageFor(cmd, "--bbox: %v", err)
		}
		s.filter.BBox = &b
	}
	if err := s.filter.Validate(); err != nil {
		return s, usageFor(cmd, "%v", err)
	}
	return s, nil
}

// match applies the source prefix again here (every store applies it
// too: this holds for the records read another way, such as a replay's
// fetch).
func (s selection) match(env *envelope.Envelope) bool {
	return s.sourcePrefix == "" || strings.HasPrefix(sourceOf(env, s.filter.SourcePointer), s.sourcePrefix)
}

// checkSourcePointer checks a --source-pointer value ("" is the
// default): every command that takes one says the same of a bad one, a
// usage error.
func checkSourcePointer(p string) error {
	if err := broker.ValidSourcePointer(p); err != nil {
		return fmt.Errorf("--source-pointer: %w", err)
	}
	return nil
}

// sourceOf is env's source at pointer (default /source_uri), as the
// stores read it.
func sourceOf(env *envelope.Envelope, pointer string) string {
	return broker.SourceOf(env, pointer)
}

// clientSide reports whether some filter is applied here rather than in
// the store.
func (s selection) clientSide() bool { return s.sourcePrefix != "" }

// parseWhen reads an RFC 3339 time, or a duration ago ("24h", "7d",
// "90m"); "" is the zero time.
func parseWhen(v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	d, err := parseDuration(v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time nor a duration like 24h or 7d", v)
	}
	return now.Add(-d), nil
}

// parseDuration is time.ParseDuration that also accepts whole days ("7d").
func parseDuration(v string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(v, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil || days < 0 {
			return 0, fmt.Errorf("bad number of days %q", v)
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(v)
	if err == nil && d < 0 {
		return 0, fmt.Errorf("negative duration %q", v)
	}
	return d, err
}

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

// item is a record with its decoded envelope (nil when the record is not
// an envelope).
type item struct {
	broker.Entry
	env *envelope.Envelope
}

func itemOf(e broker.Entry) item {
	it := item{Entry: e}
	if e.Record == nil || e.Record.Message == nil {
		return it
	}
	if env, err := envelope.Decode(e.Record.Message.Body); err == nil {
		it.env = env
	}
	return it
}

// keep reports whether it passes sel: records that are not envelopes
// only pass an empty selection.
func (s selection) keep(it item) bool {
	if it.env == nil {
		return s.filter.IsZero() && !s.clientSide()
	}
	return s.match(it.env)
}

// eachRecord calls fn for every record of the selected destinations that
// matches sel, oldest first within a destination.
func (a *app) eachRecord(ctx context.Context, s *broker.Store, sel selection, fn func(item) error) error {
	dests, err := a.destinations(ctx, s)
	if err != nil {
		return err
	}
	rl := &releasingLister{l: s}
	for _, d := range dests {
		lo := broker.ListOptions{Destination: d, Filter: sel.filter, IncludeReplayed: sel.replayed, Limit: broker.MaxListLimit}
		for {
			p, err := rl.List(ctx, lo)
			if err != nil {
				return fmt.Errorf("reading %q: %w", d, cannotList(s, err))
			}
			for i, e := range p.Entries {
				p.Entries[i] = broker.Entry{} // let go of each body once handled
				if e.Record == nil {
					continue
				}
				if it := itemOf(e); sel.keep(it) {
					if err := fn(it); err != nil {
						return err
					}
				}
			}
			if p.Next == "" || p.Next == lo.After {
				break
			}
			lo.After = p.Next
		}
	}
	return nil
}

// release collects the page read last when it held releaseBytes or
// more: its caller is done with it.
func (r *releasingLister) release() {
	if r.held >= releaseBytes {
		runtime.GC()
	}
	r.held = 0
}

// eachSummary calls fn for the summary of every record of the selected
// destinations that the store's filter keeps, oldest first within a
// destination, reading no body (fn is given entries whose Summary is
// set; the source prefix is the store's to apply, as for list).
func (a *app) eachSummary(ctx context.Context, s *broker.Store, sel selection, fn func(broker.Entry) error) error {
	dests, err := a.destinations(ctx, s)
	if err != nil {
		return err
	}
	for _, d := range dests {
		err := s.ScanAll(ctx, broker.ListOptions{Destination: d, Filter: sel.filter, IncludeReplayed: sel.replayed, Limit: broker.MaxListLimit, Summaries: true},
			func(e broker.Entry) error {
				if e.Record == nil || e.Summary == nil {
					return nil
				}
				return fn(e)
			})
		if err != nil {
			return fmt.Errorf("reading %q: %w", d, cannotList(s, err))
		}
	}
	return nil
}

// loadRecord reads one record whole, by its destination and id; ok is
// false when it is no longer there.
func (a *app) loadRecord(ctx context.Context, s *broker.Store, dest, id string) (it item, ok bool, err error) {
	p, err := s.List(ctx, broker.ListOptions{Destination: dest, Filter: broker.Filter{IDs: []string{id}}, IncludeReplayed: true, Limit: 1})
	if err != nil {
		return item{}, false, fmt.Errorf("reading %s/%s: %w", dest, id, cannotList(s, err))
	}
	for _, e := range p.Entries {
		if e.Record != nil && e.Record.ID == id {
			return itemOf(e), true, nil
		}
	}
	return item{}, false, nil
}

// releaseBytes is how many body bytes a page holds before
// releasingLister collects them ahead of the next page.
const releaseBytes = 4 << 20

// releasingLister lists through l, and collects the garbage of a page
// whose bodies held releaseBytes or more before it reads the next: the
// records of a page are done with when the next is asked for, so a
// listing of large records holds one page of them at a time rather
// than the collector's growth allowance over several (a page of
// broker.DefaultListBytes of bodies, or one larger record).
type releasingLister struct {
	l interface {
		List(ctx context.Context, opts broker.ListOptions) (broker.Page, error)
	}
	held int // body bytes of the page read last
}

// List implements warehouse.Lister.
func (r *releasingLister) List(ctx context.Context, opts broker.ListOptions) (broker.Page, error) {
	r.release()
	p, err := r.l.List(ctx, opts)
	r.held = 0
	for _, e := range p.Entries {
		if e.Record != nil && e.Record.Message != nil {
			r.held += len(e.Record.Message.Body)
		}
	}
	return p, err
}

// errNotFound is returned by findRecord.
var errNotFound = errors.New("no such record")

// findRecords returns the records ref names — "DEST/ID", a record id, or
// an event id — among the selected destinations, pending and replayed.
// Several records share an event id when an event was dead-lettered again
// after a replay; the oldest come first.
func (a *app) findRecords(ctx context.Context, s *broker.Store, ref string) ([]item, error) {
	var dests []string
	id := ref
	if i := strings.LastIndexByte(ref, '/'); i > 0 && i < len(ref)-1 {
		dests, id = []string{ref[:i]}, ref[i+1:]
		if err := broker.ValidDestination(dests[0]); err != nil {
			dests, id = nil, ref
		}
	}
	if dests == nil {
		var err error
		if dests, err = a.destinations(ctx, s); err != nil {
			return nil, err
		}
	}
	find := func(f broker.Filter) ([]item, error) {
		var out []item
		for _, d := range dests {
			err := s.ScanAll(ctx, broker.ListOptions{Destination: d, Filter: f, IncludeReplayed: true, Limit: broker.MaxListLimit},
				func(e broker.Entry) error {
					if e.Record != nil {
						out = append(out, itemOf(e))
					}
					return nil
				})
			if err != nil {
				return nil, fmt.Errorf("reading %q: %w", d, cannotList(s, err))
			}
		}
		return out, nil
	}
	byID, err := find(broker.Filter{IDs: []string{id}})
	if err != nil {
		return nil, err
	}
	if len(byID) > 0 {
		return byID, nil
	}
	return find(broker.Filter{EventIDs: []string{ref}})
}

// findRecord finds the one record ref names (see findRecords). When an
// event id matches several records, the newest wins and a note goes to
// stderr; a record id in several destinations must be named DEST/ID.
func (a *app) findRecord(ctx context.Context, s *broker.Store, ref string) (item, error) {
	its, err := a.findRecords(ctx, s, ref)
	if err != nil {
		return item{}, err
	}
	switch {
	case len(its) == 0:
		return item{}, &usageError{err: fmt.Errorf("%q: %w (give a record id, DEST/ID or an event id; geodlq list shows them)", ref, errNotFound)}
	case len(its) == 1:
		return its[0], nil
	}
	if its[0].Record.ID == ref || strings.HasSuffix(ref, "/"+its[0].Record.ID) {
		var refs []string
		for _, it := range its {
			refs = append(refs, it.Record.Destination+"/"+it.Record.ID)
		}
		return item{}, usagef("record id %q is in several destinations (%s): name one as DEST/ID", ref, strings.Join(refs, ", "))
	}
	it := its[len(its)-1]
	fmt.Fprintf(a.stderr, "geodlq: %d records for event %s; showing the newest, %s/%s\n", len(its), ref, it.Record.Destination, it.Record.ID)
	return it, nil
}

// view is a record as list, show and export write it in JSON. The field
// names are stable.
type view struct {
	ID                 string          `json:"id"`
	Destination        string          `json:"destination"`
	Status             string          `json:"status,omitempty"`
	Envelope           bool            `json:"envelope"`
	EventID            string          `json:"event_id,omitempty"`
	IdempotencyKey     string          `json:"idempotency_key,omitempty"`
	KeyDerived         bool            `json:"idempotency_key_derived,omitempty"`
	FailureClass       string          `json:"failure_class,omitempty"`
	FailedStage        string          `json:"failed_stage,omitempty"`
	ErrorMessage       string          `json:"error_message,omitempty"`
	Reason             string          `json:"reason,omitempty"`
	ReasonKind         string          `json:"reason_kind,omitempty"`
	Location           []float64       `json:"location,omitempty"`
	Fault              *classify.Fault `json:"fault,omitempty"`
	EPSG               int             `json:"epsg"`
	SourceCRS          string          `json:"source_crs,omitempty"`
	GeometryType       string          `json:"geometry_type,omitempty"`
	VertexCount        int             `json:"vertex_count,omitempty"`
	GeometryBytes      int64           `json:"geometry_bytes,omitempty"`
	GeometryOffloadURI string          `json:"geometry_offload_uri,omitempty"`
	PayloadOffloadURI  string          `json:"payload_offload_uri,omitempty"`
	PayloadSize        int64           `json:"payload_size,omitempty"`
	PayloadSHA256      string          `json:"payload_sha256,omitempty"`
	Attempts           int             `json:"attempts,omitempty"`
	FirstSeenAt        string          `json:"first_seen_at,omitempty"`
	DeadLetteredAt     string          `json:"dead_lettered_at,omitempty"`
	PublishedAt        string          `json:"published_at,omitempty"`
	ReplayedAt         string          `json:"replayed_at,omitempty"`
	SourceSystem       string          `json:"source_system,omitempty"`
	SourceTopic        string          `json:"source_topic,omitempty"`
	// SourceURI is the event's source: its value at --source-pointer
	// (default /source_uri), as the stores, stats and the console read it
	// (broker.SourceOf).
	SourceURI string            `json:"source_uri,omitempty"`
	Headers   map[string]string `json:"headers,omitempty"`
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// viewOf is the view of a record read whole; its source is the event's
// value at pointer ("" is the default).
func viewOf(it item, pointer string) view {
	r := it.Record
	v := view{
		ID: r.ID, Destination: r.Destination, Status: string(it.Status), Envelope: it.env != nil,
		PublishedAt: stamp(it.PublishedAt), ReplayedAt: stamp(it.ReplayedAt),
	}
	if r.Message != nil && len(r.Message.Headers) > 0 {
		v.Headers = r.Message.Headers
	}
	e := it.env
	if e == nil {
		if r.Message != nil {
			v.EventID = r.Message.Header(broker.HeaderEventID)
			v.IdempotencyKey = r.Message.Header(broker.HeaderIdempotencyKey)
			v.KeyDerived = r.Message.Header(broker.HeaderIdempotencyKeyDerived) == "true"
		}
		return v
	}
	v.EventID, v.IdempotencyKey, v.KeyDerived = e.EventID, e.IdempotencyKey, e.IdempotencyKeyDerived
	v.FailureClass, v.FailedStage, v.ErrorMessage = e.FailureClass.String(), e.FailedStage.String(), e.ErrorMessage
	if ge := e.GeometryError; ge != nil {
		v.Reason, v.ReasonKind, v.Location, v.Fault = ge.Reason, ge.Kind, ge.Location, ge.Fault
	}
	v.EPSG = broker.EPSGOf(e)
	v.SourceCRS, v.GeometryType, v.VertexCount = e.SourceCRS, e.GeometryType, e.VertexCount
	v.GeometryBytes, v.GeometryOffloadURI, v.PayloadOffloadURI = e.Geometry.ByteSize, e.Geometry.OffloadURI, e.RawPayloadOffloadURI
	v.PayloadSize, v.PayloadSHA256, v.Attempts = e.PayloadSize, e.PayloadSHA256, e.Attempts
	v.FirstSeenAt, v.DeadLetteredAt = stamp(e.FirstSeenAt), stamp(e.DeadLetteredAt)
	if e.Source != nil {
		v.SourceSystem, v.SourceTopic = e.Source.System, e.Source.Topic
	}
	v.SourceURI = broker.SourceOf(e, pointer)
	return v
}

// where renders a fault for people: "(0.5 0.5) ring 0 segment 0-1", or
// "-" for none (geojson.Where, as the console's detail panel words it).
func where(loc []float64, f *classify.Fault) string {
	if s := geojson.Where(loc, f); s != "" {
		return s
	}
	return "-"
}

// errStop ends a scan early without error.
var errStop = errors.New("stop")
