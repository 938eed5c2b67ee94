package console

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/time/rate"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/cmd/geodlq/internal/replaying"
	"github.com/geodlq/geodlq/replay"
)

// consoleHints name, in the reasons a replay job gives, the dialog's
// controls.
var consoleHints = replaying.Hints{
	Repair:    func(n string) string { return "the " + n + " repair" },
	Unchanged: func(c classify.Class) string { return `"replay ` + c.String() + ` unchanged"` },
	NoCheck:   `"skip the consumer's check"`,
	Route:     "a route (topic)",
}

// Actions run as jobs: a dry run first, which resolves the selection to
// records and says what would happen to each, then the real run, which
// must name the dry run it confirms and acts on the records that dry run
// found would be replayed (or discarded), no others. Replays go through
// replay.Replayer as `geodlq replay` does (restore and verify, repair,
// check, re-inject with the original idempotency key, acknowledge only
// then), discards through Store.Purge with the records' ids, as `geodlq
// purge` does.

// Job limits.
const (
	// maxJobRecords bounds the records one job selects.
	maxJobRecords = 100_000
	// jobChunk is how many records a job hands the replayer at a time
	// (progress is reported between chunks; a cancel stops between
	// records).
	jobChunk = 50
	// confirmWithin is how long a dry run stays confirmable.
	confirmWithin = 30 * time.Minute
	// keptJobs is how many finished jobs the console remembers.
	keptJobs = 50
	// maxRunning bounds the jobs running at once.
	maxRunning = 4
	// jobItemsPage is how many per-record outcomes one GET returns.
	jobItemsPage = 1000
)

// JobRequest is the body of POST /api/jobs.
type JobRequest struct {
	// Action is "replay" or "discard".
	Action string `json:"action"`
	// DryRun says what would happen and changes nothing. A real run
	// (false) must Confirm a dry run.
	DryRun bool `json:"dry_run"`
	// Records selects records by destination and id; Filter selects by
	// the list's filters. One of them is required for a dry run.
	Records []RecordRef `json:"records,omitempty"`
	Filter  *Query      `json:"filter,omitempty"`
	// Repairs names the repairs a replay applies: make-valid
	// (invalid_geometry), reproject or reproject+make-valid
	// (crs_mismatch: reproject, then MakeValid when the result is
	// invalid).
	Repairs []string `json:"repairs,omitempty"`
	// Unchanged names the classes a replay re-injects as they are, with
	// no repair (invalid_geometry, crs_mismatch).
	Unchanged []string `json:"unchanged,omitempty"`
	// NoCheck re-injects without checking the payload as the consumer
	// will (as geodlq replay --no-check).
	NoCheck bool `json:"no_check,omitempty"`
	// Target chooses where a replay re-injects: the index of one of the
	// console's targets (GET /api/config), or "store" for the store
	// itself, which takes only the records its own broker delivered.
	// Default: the first target, or the store when there is none.
	Target string `json:"target,omitempty"`
	// Route is the topic every record is re-injected into; default each
	// envelope's source topic.
	Route string `json:"route,omitempty"`
	// Rate re-injects at most this many events a second; 0, no limit.
	// A confirmed run takes its own (the dry run re-injects nothing).
	Rate float64 `json:"rate,omitempty"`
	// Confirm is the id of the finished dry run a real run carries out,
	// on the records that dry run found would be replayed or discarded.
	Confirm string `json:"confirm,omitempty"`
}

// RecordRef names a record.
type RecordRef struct {
	Destination string `json:"destination"`
	ID          string `json:"id"`
}

// JobItem is one record's outcome.
type JobItem struct {
	Destination string `json:"destination"`
	RecordID    string `json:"record_id"`
	EventID     string `json:"event_id,omitempty"`
	Class       string `json:"class,omitempty"`
	Outcome     string `json:"outcome"`
	Target      string `json:"target,omitempty"`
	Repair      string `json:"repair,omitempty"`
	Error       string `json:"error,omitempty"`
	// Why says why a record was left in place (or, in a dry run, would
	// fail or be skipped), and what would change it.
	Why string `json:"why,omitempty"`
}

// Job is a replay or discard, its progress and its outcomes.
type Job struct {
	ID        string   `json:"id"`
	Action    string   `json:"action"`
	DryRun    bool     `json:"dry_run"`
	Repairs   []string `json:"repairs"`
	Unchanged []string `json:"unchanged"`
	NoCheck   bool     `json:"no_check,omitempty"`
	// Target is the label of where a replay re-injects; Route the topic,
	// when one was named; Rate its limit a second.
	Target string  `json:"target,omitempty"`
	Route  string  `json:"route,omitempty"`
	Rate   float64 `json:"rate,omitempty"`
	// Filter is the selection a dry run was given by filter, as given;
	// Records how many records it was given by name.
	Filter   *Query    `json:"filter,omitempty"`
	Records  int       `json:"records,omitempty"`
	Confirms string    `json:"confirms,omitempty"`
	State    string    `json:"state"` // running, done, failed, cancelled
	Created  time.Time `json:"created"`
	Finished time.Time `json:"finished,omitzero"`
	// Phase is "selecting" while a dry run finds the records its filter
	// selects, then "".
	Phase string `json:"phase,omitempty"`
	// Selected is the number of records the job acts on; Done how many it
	// has looked at.
	Selected int            `json:"selected"`
	Done     int            `json:"done"`
	Counts   map[string]int `json:"counts"`
	Error    string         `json:"error,omitempty"`
	// Orphaned counts offloaded blobs no remaining record references
	// after a discard.
	Orphaned int `json:"orphaned_blobs,omitempty"`
	// Items are the per-record outcomes from ItemsOffset on (at most 1000
	// per answer), the records that need a look first (left in place,
	// would fail, skipped, unavailable), then the others, each in the
	// order they were done; ItemsTotal is how many there are.
	Items       []JobItem `json:"items"`
	ItemsOffset int       `json:"items_offset"`
	ItemsTotal  int       `json:"items_total"`
	// ConfirmedBy is the real run that carried this dry run out.
	ConfirmedBy string `json:"confirmed_by,omitempty"`
	// LeasesLost counts the records whose leases a replay lost before it
	// was done with them (replay.Report.LeasesLost, over the job's
	// runs): another replayer took them over, or a lease lapsed while the
	// store did not answer. The job acted on none of them twice.
	LeasesLost int `json:"leases_lost,omitempty"`
	// Incomplete is empty when the job examined every record it was
	// given that no other replayer held; otherwise it says why not
	// (replay.Report.Incomplete): the job must be taken as partial, and
	// run again.
	Incomplete string `json:"incomplete,omitempty"`
}

type job struct {
	mu sync.Mutex
	j  Job
	// attention holds the outcomes a person must look at, items the
	// others: a view lists attention first.
	attention, items []JobItem
	sel              map[string][]string // destination -> record ids
	filter           *selection          // a dry run's filter, until resolved
	target           Target              // where a replay re-injects
	intoStore        string              // the store's name when target is the store itself
	cancel           context.CancelFunc
}

// needsLook reports whether an outcome is one a person must look at:
// not replayed, repaired or discarded, nor would be.
func needsLook(outcome string) bool {
	switch outcome {
	case string(replay.OutcomeReplayed), string(replay.OutcomeRepaired), string(replay.OutcomeWouldReplay),
		string(replay.OutcomeWouldRepair), "would_discard", "discarded":
		return false
	}
	return true
}

// all returns every outcome, in view order.
func (jb *job) all() []JobItem {
	return append(slices.Clip(jb.attention), jb.items...)
}

func (jb *job) view(offset int) Job {
	jb.mu.Lock()
	defer jb.mu.Unlock()
	v := jb.j
	v.Counts = make(map[string]int, len(jb.j.Counts))
	for k, n := range jb.j.Counts {
		v.Counts[k] = n
	}
	n := len(jb.attention) + len(jb.items)
	v.ItemsTotal = n
	offset = min(max(offset, 0), n)
	v.ItemsOffset = offset
	end := min(n, offset+jobItemsPage)
	v.Items = make([]JobItem, 0, end-offset)
	for i := offset; i < end; i++ {
		if i < len(jb.attention) {
			v.Items = append(v.Items, jb.attention[i])
		} else {
			v.Items = append(v.Items, jb.items[i-len(jb.attention)])
		}
	}
	if v.Items == nil {
		v.Items = []JobItem{}
	}
	return v
}

type jobs struct {
	s     *Server
	mu    sync.Mutex
	byID  map[string]*job
	order []string
}

func newJobs(s *Server) *jobs { return &jobs{s: s, byID: map[string]*job{}} }

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (s *Server) listJobs(w http.ResponseWriter, r *http.Request) {
	s.jobs.mu.Lock()
	ids := slices.Clone(s.jobs.order)
	s.jobs.mu.Unlock()
	out := []Job{}
	for _, id := range slices.Backward(ids) {
		if jb := s.jobs.get(id); jb != nil {
			v := jb.view(0)
			v.Items = []JobItem{}
			out = append(out, v)
		}
	}
	writeJSON(w, map[string]any{"jobs": out})
}

func (js *jobs) get(id string) *job {
	js.mu.Lock()
	defer js.mu.Unlock()
	return js.byID[id]
}

func (s *Server) getJob(w http.ResponseWriter, r *http.Request) {
	jb := s.jobs.get(r.PathValue("job"))
	if jb == nil {
		s.problem(w, r, http.StatusNotFound, "not found", fmt.Sprintf("no job %q (the console keeps the last %d)", clip(r.PathValue("job"), 40), keptJobs))
		return
	}
	off := 0
	if o := r.URL.Query().Get("offset"); o != "" {
		n, err := strconv.Atoi(o)
		if err != nil || n < 0 {
			s.fail(w, r, badQuery("offset %q: want a non-negative integer", o))
			return
		}
		off = n
	}
	writeJSON(w, jb.view(off))
}

func (s *Server) cancelJob(w http.ResponseWriter, r *http.Request) {
	jb := s.jobs.get(r.PathValue("job"))
	if jb == nil {
		s.problem(w, r, http.StatusNotFound, "not found", fmt.Sprintf("no job %q", clip(r.PathValue("job"), 40)))
		return
	}
	jb.cancel()
	writeJSON(w, jb.view(0))
}

// conflictError is a request the current state refuses: 409.
type conflictError struct{ msg string }

func (e *conflictError) Error() string { return e.msg }

func (s *Server) startJob(w http.ResponseWriter, r *http.Request) {
	var req JobRequest
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		s.fail(w, r, badQuery("the body is not a job request: %v", err))
		return
	}
	jb, err := s.jobs.start(r.Context(), req)
	if err != nil {
		var ce *conflictError
		if errors.As(err, &ce) {
			s.problem(w, r, http.StatusConflict, "cannot start the job", ce.msg)
			return
		}
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Location", "/api/jobs/"+jb.j.ID)
	w.WriteHeader(http.StatusAccepted)
	writeJSON(w, jb.view(0))
}

// start validates req, resolves its selection and starts the job.
func (js *jobs) start(ctx context.Context, req JobRequest) (*job, error) {
	s := js.s
	if req.Action != "replay" && req.Action != "discard" {
		return nil, badQuery("action %q: want replay or discard", req.Action)
	}
	repairs, unchanged := sortedSet(req.Repairs), sortedSet(req.Unchanged)
	var classes []classify.Class
	for _, u := range unchanged {
		c, err := classify.ParseClass(u)
		if err != nil {
			return nil, badQuery("unchanged %q: want %s", clip(u, 40), strings.Join(unchangedNames(), " or "))
		}
		classes = append(classes, c)
	}
	if err := replaying.Validate(repairs, classes); err != nil {
		return nil, badQuery("%v", err)
	}
	if req.Action == "discard" && (len(repairs) > 0 || len(unchanged) > 0 || req.NoCheck || req.Target != "" || req.Route != "" || req.Rate != 0) {
		return nil, badQuery("a discard takes no repairs, target, route, rate or check")
	}
	if req.Route != "" {
		if err := broker.ValidDestination(req.Route); err != nil {
			return nil, badQuery("route: %v", err)
		}
	}
	if req.Rate < 0 || math.IsNaN(req.Rate) || math.IsInf(req.Rate, 0) {
		return nil, badQuery("rate must be a non-negative number of events a second")
	}
	jb := &job{j: Job{ID: newID(), Action: req.Action, DryRun: req.DryRun, Repairs: nonNil(repairs), Unchanged: nonNil(unchanged),
		NoCheck: req.NoCheck, Route: req.Route, Rate: req.Rate, State: "running", Created: s.opts.Now(), Counts: map[string]int{}}}
	if req.Action == "replay" {
		t, into, err := s.target(req.Target)
		if err != nil {
			return nil, err
		}
		jb.target, jb.intoStore, jb.j.Target = t, into, t.Label
	}
	if req.DryRun {
		if req.Confirm != "" {
			return nil, badQuery("a dry run confirms nothing: leave confirm out")
		}
		if req.Filter != nil && len(req.Records) == 0 {
			// Checked now, resolved by the job: a filter may select a
			// hundred thousand records, read from the store.
			f, err := req.Filter.parse(s.opts.Now(), s.opts.SourcePointer)
			if err != nil {
				return nil, err
			}
			jb.filter, jb.j.Phase, jb.j.Filter = &f, "selecting", req.Filter
		} else {
			sel, n, err := s.resolve(ctx, req)
			if err != nil {
				return nil, err
			}
			jb.sel, jb.j.Selected, jb.j.Records = sel, n, n
		}
	} else {
		if req.Confirm == "" {
			return nil, badQuery("a %s must confirm a dry run: start one with dry_run true, read its outcomes, then send confirm with its id", req.Action)
		}
		if len(req.Records) > 0 || req.Filter != nil {
			return nil, badQuery("a confirmed run acts on its dry run's records: leave records and filter out")
		}
		dry := js.get(req.Confirm)
		if dry == nil {
			return nil, &conflictError{fmt.Sprintf("no dry run %q (the console keeps the last %d jobs)", clip(req.Confirm, 40), keptJobs)}
		}
		dry.mu.Lock()
		d := dry.j
		var picked map[string][]string
		n := 0
		if d.DryRun && d.State == "done" && d.Action == req.Action && sameChoices(d, jb.j) && d.ConfirmedBy == "" &&
			s.opts.Now().Sub(d.Finished) <= confirmWithin {
			picked = map[string][]string{}
			for _, it := range dry.items { // the outcomes that need no look: would_*
				if it.Outcome == string(replay.OutcomeWouldReplay) || it.Outcome == string(replay.OutcomeWouldRepair) || it.Outcome == "would_discard" {
					picked[it.Destination] = append(picked[it.Destination], it.RecordID)
					n++
				}
			}
			dry.j.ConfirmedBy = jb.j.ID
		}
		dry.mu.Unlock()
		switch {
		case picked == nil && d.ConfirmedBy != "":
			return nil, &conflictError{fmt.Sprintf("dry run %s was already carried out by job %s; start a new dry run", d.ID, d.ConfirmedBy)}
		case picked == nil:
			return nil, &conflictError{fmt.Sprintf("job %s is not a finished %s dry run with the same repairs, target, route and check from the last %v",
				d.ID, req.Action, confirmWithin)}
		}
		jb.sel, jb.j.Selected, jb.j.Confirms, jb.j.Filter, jb.j.Records = picked, n, d.ID, d.Filter, d.Records
	}
	if err := js.add(jb); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(s.ctx)
	jb.cancel = cancel
	s.wg.Go(func() {
		defer cancel()
		js.run(ctx, jb)
	})
	return jb, nil
}

// sameChoices reports whether a real run makes the choices its dry run
// made (all but the rate, which a dry run does not use).
func sameChoices(dry, real Job) bool {
	return slices.Equal(dry.Repairs, real.Repairs) && slices.Equal(dry.Unchanged, real.Unchanged) && dry.NoCheck == real.NoCheck &&
		dry.Target == real.Target && dry.Route == real.Route
}

func sortedSet(xs []string) []string {
	out := slices.Clone(xs)
	slices.Sort(out)
	return slices.Compact(out)
}

func unchangedNames() []string {
	var out []string
	for _, c := range replaying.UnchangedClasses() {
		out = append(out, c.String())
	}
	return out
}

// targetInfo describes a replay target for the page.
type targetInfo struct {
	// ID is what a job request names it by: an index, or "store".
	ID    string `json:"id"`
	Label string `json:"label"`
	// Store is set for the store itself, which takes only the records
	// its own broker delivered.
	Store   bool `json:"store,omitempty"`
	Default bool `json:"default,omitempty"`
}

func (s *Server) targetInfos() []targetInfo {
	out := []targetInfo{}
	for i, t := range s.opts.Targets {
		out = append(out, targetInfo{ID: strconv.Itoa(i), Label: t.Label, Default: i == 0})
	}
	return append(out, targetInfo{ID: "store", Label: s.opts.Label, Store: true, Default: len(s.opts.Targets) == 0})
}

// target resolves a job's target; into is the store's name when it is
// the store itself.
func (s *Server) target(id string) (t Target, into string, err error) {
	switch {
	case id == "" && len(s.opts.Targets) > 0:
		return s.opts.Targets[0], "", nil
	case id == "" || id == "store":
		return Target{Label: s.opts.Label, Publisher: s.store}, s.store.Name(), nil
	}
	i, err := strconv.Atoi(id)
	if err != nil || i < 0 || i >= len(s.opts.Targets) {
		return Target{}, "", badQuery("target %q: want one of the ids of GET /api/config's targets", clip(id, 40))
	}
	return s.opts.Targets[i], "", nil
}

// add registers jb, forgetting the oldest finished jobs.
func (js *jobs) add(jb *job) error {
	js.mu.Lock()
	defer js.mu.Unlock()
	running := 0
	for _, id := range js.order {
		j := js.byID[id]
		j.mu.Lock()
		if j.j.State == "running" {
			running++
		}
		j.mu.Unlock()
	}
	if running >= maxRunning {
		return &conflictError{fmt.Sprintf("%d jobs are running: wait for one to finish or cancel one", running)}
	}
	js.byID[jb.j.ID] = jb
	js.order = append(js.order, jb.j.ID)
	for len(js.order) > keptJobs {
		old := js.byID[js.order[0]]
		old.mu.Lock()
		done := old.j.State != "running"
		old.mu.Unlock()
		if !done {
			break
		}
		delete(js.byID, js.order[0])
		js.order = js.order[1:]
	}
	return nil
}

// resolve turns a dry run's selection into record ids per destination.
func (s *Server) resolve(ctx context.Context, req JobRequest) (map[string][]string, int, error) {
	out := map[string][]string{}
	switch {
	case len(req.Records) > 0 && req.Filter != nil:
		return nil, 0, badQuery("select by records or by filter, not both")
	case len(req.Records) > 0:
		if len(req.Records) > maxJobRecords {
			return nil, 0, badQuery("%d records selected (limit %d)", len(req.Records), maxJobRecords)
		}
		seen := map[RecordRef]bool{}
		for _, rr := range req.Records {
			if err := broker.ValidDestination(rr.Destination); err != nil {
				return nil, 0, badQuery("record %q: %v", clip(rr.ID, 40), err)
			}
			if rr.ID == "" || len(rr.ID) > maxIDLen || !utf8.ValidString(rr.ID) {
				return nil, 0, badQuery("record ids must be 1 to %d bytes of UTF-8", maxIDLen)
			}
			if !seen[rr] {
				seen[rr] = true
				out[rr.Destination] = append(out[rr.Destination], rr.ID)
			}
		}
		return out, len(seen), nil
	case req.Filter != nil:
		return nil, 0, badQuery("a filter is resolved by its job")
	}
	return nil, 0, badQuery("a dry run needs records or a filter")
}

// resolveFilter finds the records sel selects, per destination, reading
// the store; progress is told the count every thousand records.
func (s *Server) resolveFilter(ctx context.Context, sel selection, progress func(int)) (map[string][]string, int, error) {
	out := map[string][]string{}
	n := 0
	err := s.store.ScanAll(ctx, broker.ListOptions{Destination: sel.q.Destination, Filter: sel.filter, Limit: broker.MaxListLimit},
		func(e broker.Entry) error {
			if e.Record == nil || reinjected(e.Record) {
				return nil
			}
			env := envelopeOf(e.Record)
			if (env == nil && sel.envelopeOnly()) || !sel.match(e.Record.ID, env) {
				return nil
			}
			if n++; n > maxJobRecords {
				return fmt.Errorf("the filter selects more than %d records: narrow it", maxJobRecords)
			}
			if n%1000 == 0 {
				progress(n)
			}
			out[e.Record.Destination] = append(out[e.Record.Destination], e.Record.ID)
			return nil
		})
	return out, n, err
}

// run carries a job out.
func (js *jobs) run(ctx context.Context, jb *job) {
	s := js.s
	var err error
	if jb.filter != nil {
		var sel map[string][]string
		var n int
		sel, n, err = s.resolveFilter(ctx, *jb.filter, func(n int) {
			jb.mu.Lock()
			jb.j.Selected = n
			jb.mu.Unlock()
		})
		jb.mu.Lock()
		jb.sel, jb.j.Selected, jb.j.Phase = sel, n, ""
		jb.mu.Unlock()
	}
	switch {
	case err != nil:
	case jb.j.Action == "replay":
		err = js.replay(ctx, jb)
	default:
		err = js.discard(ctx, jb)
	}
	jb.mu.Lock()
	jb.j.Finished = s.opts.Now()
	switch {
	case ctx.Err() != nil:
		jb.j.State = "cancelled"
		if s.ctx.Err() != nil {
			jb.j.Error = "the console is shutting down"
		}
	case err != nil:
		jb.j.State, jb.j.Error = "failed", err.Error()
	default:
		jb.j.State = "done"
	}
	if jb.j.State != "done" {
		// Records the job never reached.
		all := jb.all()
		reached := make(map[recKey]bool, len(all))
		for _, it := range all {
			reached[recKey{it.Destination, it.RecordID}] = true
		}
		for dest, ids := range jb.sel {
			for _, id := range ids {
				if !reached[recKey{dest, id}] {
					jb.add(JobItem{Destination: dest, RecordID: id, Outcome: "not_run", Why: "the job ended before it reached this record"})
				}
			}
		}
	}
	jb.mu.Unlock()
	s.log.Info("geodlq serve: job finished", slog.String("job", jb.j.ID), slog.String("action", jb.j.Action),
		slog.Bool("dry_run", jb.j.DryRun), slog.String("state", jb.j.State), slog.Any("counts", jb.j.Counts))
	s.hub.publish(event{Name: "job", Data: jb.view(0).summary()})
	if !jb.j.DryRun {
		s.overviews.clear()
		n := s.watch.count()
		if c, err := s.watch.recount(s.ctx); err == nil {
			n = c
		}
		s.hub.publish(event{Name: "changed", Data: map[string]int{"records": n}})
	}
}

func (j Job) summary() Job {
	j.Items = []JobItem{}
	return j
}

func (jb *job) record(items []JobItem) {
	jb.mu.Lock()
	defer jb.mu.Unlock()
	for _, it := range items {
		jb.add(it)
	}
	jb.j.Done += len(items)
}

// add keeps one outcome; jb.mu is held.
func (jb *job) add(it JobItem) {
	if needsLook(it.Outcome) {
		jb.attention = append(jb.attention, it)
	} else {
		jb.items = append(jb.items, it)
	}
	jb.j.Counts[it.Outcome]++
}

// incomplete keeps what a run of the job said about its completeness:
// the leases it lost add up over the job's runs, and the job says it is
// incomplete as the CLI's replay does.
func (jb *job) incomplete(rep replay.Report) {
	if rep.LeasesLost == 0 && rep.Incomplete == "" {
		return
	}
	jb.mu.Lock()
	defer jb.mu.Unlock()
	jb.j.LeasesLost += rep.LeasesLost
	switch {
	case jb.j.LeasesLost > 0:
		jb.j.Incomplete = fmt.Sprintf("%d records' leases were lost during the job (another process took them over, or they lapsed): "+
			"records may have been left unexamined; run it again", jb.j.LeasesLost)
	default:
		jb.j.Incomplete = rep.Incomplete
	}
}

// chunks cuts ids into runs of at most n.
func chunks[T any](ids []T, n int) [][]T {
	var out [][]T
	for len(ids) > 0 {
		k := min(n, len(ids))
		out = append(out, ids[:k])
		ids = ids[k:]
	}
	return out
}

func sortedDests(sel map[string][]string) []string {
	ds := make([]string, 0, len(sel))
	for d := range sel {
		ds = append(ds, d)
	}
	slices.Sort(ds)
	return ds
}

// replay runs the replayer over the job's records, a chunk at a time.
func (js *jobs) replay(ctx context.Context, jb *job) error {
	s := js.s
	var classes []classify.Class
	for _, u := range jb.j.Unchanged {
		c, _ := classify.ParseClass(u) // checked when the job started
		classes = append(classes, c)
	}
	repairers, err := replaying.Repairers(s.checker.Checker, jb.j.Repairs, classes)
	if err != nil {
		return err
	}
	var limiter *rate.Limiter
	if !jb.j.DryRun {
		limiter = replaying.NewLimiter(jb.j.Rate)
	}
	opts := replay.Options{Source: s.store, Target: &replaying.Target{Publisher: jb.target.Publisher, Limiter: limiter}, Repairers: repairers,
		Logger: s.log, BatchSize: jobChunk, Route: replaying.Route(jb.j.Route, jb.intoStore, "a target other than this store")}
	if !jb.j.NoCheck {
		opts.Check = s.checker.ReplayCheck()
	}
	if jb.j.Rate > 0 {
		opts.BatchSize = max(1, min(jobChunk, int(jb.j.Rate*10)))
	}
	if s.opts.Blobs != nil {
		opts.Fetcher = s.opts.Blobs
	}
	rp, err := replay.New(&opts)
	if err != nil {
		return err
	}
	last := time.Time{}
	for _, dest := range sortedDests(jb.sel) {
		for _, ids := range chunks(jb.sel[dest], jobChunk) {
			if err := ctx.Err(); err != nil {
				return err
			}
			rep, runErr := rp.Run(ctx, replay.Request{Destination: dest, Filter: broker.Filter{IDs: ids}, DryRun: jb.j.DryRun})
			items := make([]JobItem, 0, len(ids))
			got := map[string]bool{}
			var gone []recKey
			for _, it := range rep.Items {
				got[it.RecordID] = true
				why := replaying.Why(it, consoleHints)
				replaying.Normalize(&it)
				ji := JobItem{Destination: dest, RecordID: it.RecordID, EventID: it.EventID, Outcome: string(it.Outcome), Target: it.Target, Why: why}
				if it.Class.Valid() {
					ji.Class = it.Class.String()
				}
				if it.Repair != nil {
					ji.Repair = it.Repair.String()
				}
				if it.Err != nil {
					ji.Error = clip(it.Err.Error(), 1000)
				}
				if it.Outcome == replay.OutcomePublishFailed && ctx.Err() != nil &&
					errors.Is(it.Err, context.Canceled) && !errors.Is(it.Err, broker.ErrOutcomeUnknown) {
					// Cancelled before its re-injection was written: the
					// record was released untouched, not failed.
					ji.Outcome = "interrupted"
					ji.Error = "cancelled before the re-injection: released untouched, still in the store"
					ji.Why = ji.Error
				}
				if it.Outcome == replay.OutcomeReplayed || it.Outcome == replay.OutcomeRepaired {
					gone = append(gone, recKey{dest, it.RecordID})
				}
				items = append(items, ji)
			}
			if runErr == nil {
				for _, id := range ids {
					if !got[id] {
						items = append(items, JobItem{Destination: dest, RecordID: id, Outcome: "unavailable",
							Error: "not fetched: leased by another replayer, or already replayed or discarded",
							Why:   "not fetched: leased by another replayer, or already replayed or discarded"})
					}
				}
			}
			jb.record(items)
			jb.incomplete(rep)
			s.forget(gone)
			if time.Since(last) > 250*time.Millisecond {
				last = time.Now()
				s.hub.publish(event{Name: "job", Data: jb.view(0).summary()})
			}
			if runErr != nil {
				return runErr
			}
		}
	}
	return nil
}

// discard purges the job's records (a dry run says which would go).
func (js *jobs) discard(ctx context.Context, jb *job) error {
	s := js.s
	for _, dest := range sortedDests(jb.sel) {
		for _, ids := range chunks(jb.sel[dest], broker.MaxFilterValues) {
			if err := ctx.Err(); err != nil {
				return err
			}
			res, err := s.store.Purge(ctx, broker.PurgeRequest{Destination: dest, Filter: broker.Filter{IDs: ids}, IncludePending: true, DryRun: jb.j.DryRun})
			if err != nil {
				return err
			}
			deleted := map[string]bool{}
			for _, id := range res.IDs {
				deleted[id] = true
			}
			outcome := "discarded"
			if jb.j.DryRun {
				outcome = "would_discard"
			}
			items := make([]JobItem, 0, len(ids))
			var gone []recKey
			events := s.eventIDs(ctx, dest, ids)
			for _, id := range ids {
				if deleted[id] {
					items = append(items, JobItem{Destination: dest, RecordID: id, EventID: events[id], Outcome: outcome})
					gone = append(gone, recKey{dest, id})
				} else {
					items = append(items, JobItem{Destination: dest, RecordID: id, EventID: events[id], Outcome: "unavailable",
						Error: "not deleted: leased by a replayer, or already gone", Why: "not deleted: leased by a replayer, or already gone"})
				}
			}
			jb.record(items)
			jb.mu.Lock()
			jb.j.Orphaned += len(res.Orphaned)
			jb.mu.Unlock()
			if !jb.j.DryRun {
				s.forget(gone)
			}
		}
	}
	return nil
}

// eventIDs returns the event ids of records of dest, read from the store
// (replayed ones too).
func (s *Server) eventIDs(ctx context.Context, dest string, ids []string) map[string]string {
	out := make(map[string]string, len(ids))
	for _, part := range chunks(ids, broker.MaxFilterValues) {
		p, err := s.store.List(ctx, broker.ListOptions{Destination: dest, Filter: broker.Filter{IDs: part}, IncludeReplayed: true, Limit: len(part)})
		if err != nil {
			break // the ids are a courtesy: the outcomes stand without them
		}
		for _, e := range p.Entries {
			if e.Record == nil {
				continue
			}
			if env := envelopeOf(e.Record); env != nil {
				out[e.Record.ID] = env.EventID
			} else if e.Record.Message != nil {
				out[e.Record.ID] = e.Record.Message.Header(broker.HeaderEventID)
			}
		}
	}
	return out
}
