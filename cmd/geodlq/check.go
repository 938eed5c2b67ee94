package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/jsonscan"
	"github.com/geodlq/geodlq/spatial"
)

type checkOptions struct {
	expectedEPSG int
	maxVertices  int
	deadLetter   string
	keyPath      string
	jobs         int
	out          *output
}

func newCheckCmd(a *app) *cobra.Command {
	var o checkOptions
	cmd := &cobra.Command{
		Use:   "check [FILE|-]",
		Short: "Validate events exactly as a consumer would, without a broker",
		Long: `check reads events — JSON lines (one event per line), or one GeoJSON
FeatureCollection whose features become events — from FILE or standard input,
and runs each through spatial.Checker.CheckEvent, as a consumer does. It prints
one verdict per event (class, stage, reason, location, part/ring/vertex, EPSG)
and a summary by class. A FeatureCollection's own "crs" member is given to
features that have none.

Events are checked --jobs at a time (default: the number of CPUs) and
reported in input order. JSON lines are streamed: check holds about 2×jobs
events in memory at once, however long the input; a FeatureCollection (or any
document spread over several lines) is read whole first.

Exit code 1 when any event would be dead-lettered.

With --dead-letter TOPIC, failing events are also dead-lettered into --store
(and their large geometries offloaded to --blobs) through the same processor a
consumer uses, as if consumed from TOPIC: to <TOPIC>.poison.dlt (or .retry.dlt).
Each envelope carries the event's own idempotency key, verbatim: the member
--idempotency-key-path names (default /idempotency_key); an event without one
gets the key a consumer of TOPIC derives from its exact bytes, marked
idempotency_key_derived.`,
		Args: maxArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return a.check(cmd, args, o) },
	}
	cmd.Flags().IntVar(&o.expectedEPSG, "expected-epsg", spatial.DefaultExpectedEPSG, "EPSG code of the CRS the pipeline works in")
	cmd.Flags().IntVar(&o.maxVertices, "max-vertices", spatial.DefaultMaxVertices, "most positions a geometry may have (resource_exhausted above)")
	cmd.Flags().StringVar(&o.deadLetter, "dead-letter", "", "dead-letter failing events into --store as if consumed from this topic")
	cmd.Flags().StringVar(&o.keyPath, "idempotency-key-path", envelope.DefaultIdempotencyKeyPath, "with --dead-letter: JSON pointer to the event's own idempotency key")
	cmd.Flags().IntVar(&o.jobs, "jobs", runtime.NumCPU(), "events checked at once, each on a goroutine of its own (verdicts keep the input's order)")
	o.out = addOutput(cmd, fmtTable, fmtWide, fmtJSON, fmtJSONL)
	return cmd
}

// event is one input event.
type event struct {
	where   string // "line 3", "feature 0"
	payload []byte
}

// verdict is check's report on one event. Field names are stable.
type verdict struct {
	Input          string          `json:"input"`
	EventID        string          `json:"event_id,omitempty"`
	OK             bool            `json:"ok"`
	FailureClass   string          `json:"failure_class,omitempty"`
	FailedStage    string          `json:"failed_stage,omitempty"`
	Reason         string          `json:"reason,omitempty"`
	ReasonKind     string          `json:"reason_kind,omitempty"`
	Location       []float64       `json:"location,omitempty"`
	Fault          *classify.Fault `json:"fault,omitempty"`
	EPSG           int             `json:"epsg"`
	GeometryType   string          `json:"geometry_type,omitempty"`
	VertexCount    int             `json:"vertex_count"`
	DeadLetteredTo string          `json:"dead_lettered_to,omitempty"`
}

type checkSummary struct {
	Events       int            `json:"events"`
	OK           int            `json:"ok"`
	DeadLettered int            `json:"would_dead_letter"`
	ByClass      map[string]int `json:"by_class"`
}

func (a *app) check(cmd *cobra.Command, args []string, o checkOptions) (err error) {
	if err := o.out.resolve(a, cmd); err != nil {
		return err
	}
	ctx := cmd.Context()
	in := a.stdin
	name := "-"
	if len(args) == 1 && args[0] != "-" {
		name = args[0]
		f, err := os.Open(args[0])
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	if o.jobs < 1 {
		return usageFor(cmd, "--jobs must be at least 1, got %d", o.jobs)
	}
	src, err := openEvents(in)
	if err != nil {
		var ie *inputError
		if errors.As(err, &ie) {
			return usageFor(cmd, "%s: %v", name, err)
		}
		return fmt.Errorf("reading %s: %w", name, err)
	}
	checker, err := newChecker(o.expectedEPSG, o.maxVertices)
	if err != nil {
		return err
	}
	defer checker.Close()

	var proc *broker.Processor
	if o.deadLetter != "" {
		if err := broker.ValidDestination(o.deadLetter); err != nil {
			return usageFor(cmd, "--dead-letter: %v", err)
		}
		if _, err := envelope.NewBuilder(&envelope.BuilderOptions{IdempotencyKeyPath: o.keyPath}); err != nil {
			return usageFor(cmd, "--idempotency-key-path: %v", err) // before the store is created
		}
		s, err := a.openStore(ctx, create)
		if err != nil {
			return err
		}
		defer closeWith(&err, s)
		off, closeBlobs, err := a.openBlobs(ctx, create)
		if err != nil {
			return err
		}
		defer closeBlobs()
		b, err := envelope.NewBuilder(&envelope.BuilderOptions{Offloader: off, ResolveEPSG: checker.ResolveEPSG, IdempotencyKeyPath: o.keyPath})
		if err != nil {
			return err
		}
		if proc, err = broker.NewProcessor(&broker.ProcessorOptions{
			Publisher: s, Builder: b, Logger: a.logger(), Policy: classify.Policy{MaxAttempts: 1},
		}); err != nil {
			return err
		}
	}

	// Events are checked on o.jobs goroutines and reported in input order
	// (check_stream.go); only the verdicts of the table stay in memory.
	sum := checkSummary{ByClass: map[string]int{}}
	var rows [][]string
	var doc *jsonVerdicts
	if o.out.json() {
		doc = newJSONVerdicts(a.stdout)
	}
	work := func(ctx context.Context, ev event) checked {
		r := checkOne(ctx, checker.Checker, ev)
		if r.cerr == nil || proc == nil {
			r.ev.payload = nil // not needed any more
		}
		return r
	}
	emit := func(r checked) error {
		v := r.v
		sum.Events++
		if r.cerr == nil {
			sum.OK++
		} else {
			sum.DeadLettered++
			sum.ByClass[v.FailureClass]++
			if proc != nil {
				cerr := r.cerr
				msg := &broker.Message{Body: r.ev.payload, Source: &envelope.Source{System: "geodlq-check", Topic: o.deadLetter}}
				out, perr := proc.Process(ctx, msg, func(context.Context, *broker.Message) error { return cerr })
				if perr != nil {
					return perr
				}
				v.DeadLetteredTo = out.Destination
			}
		}
		switch {
		case doc != nil:
			return doc.add(v)
		case o.out.jsonl():
			return writeJSONLine(a.stdout, v)
		}
		verdictCol, stage, reason, at := "ok", "-", "-", "-"
		if !v.OK {
			verdictCol, stage, reason, at = v.FailureClass, v.FailedStage, v.Reason, where(v.Location, v.Fault)
		}
		geom := "-"
		if v.GeometryType != "" {
			geom = fmt.Sprintf("%s/%d", v.GeometryType, v.VertexCount)
		}
		rows = append(rows, []string{v.Input, orDash(v.EventID), verdictCol, stage, reason, at, epsgLabel(v.EPSG), geom})
		return nil
	}
	if _, err := checkEvents(ctx, src, o.jobs, work, emit); err != nil {
		if doc != nil && doc.n > 0 {
			// A document cut short is still JSON, with the summary of
			// the events reported (as replay and triage do when
			// interrupted); the error decides the exit code.
			_ = doc.finish(sum)
		}
		return err
	}

	switch {
	case doc != nil:
		if err := doc.finish(sum); err != nil {
			return err
		}
	case o.out.jsonl():
	default:
		if err := a.table(o.out, []string{"INPUT", "EVENT", "VERDICT", "STAGE", "REASON", "AT", "EPSG", "GEOMETRY"}, rows, 4, 5, 1); err != nil {
			return err
		}
		fmt.Fprintf(a.stdout, "\n%d events: %d ok, %d would be dead-lettered", sum.Events, sum.OK, sum.DeadLettered)
		classes := make([]string, 0, len(sum.ByClass))
		for c := range sum.ByClass {
			classes = append(classes, c)
		}
		sort.Strings(classes)
		for i, c := range classes {
			sep := ", "
			if i == 0 {
				sep = " ("
			}
			fmt.Fprintf(a.stdout, "%s%s %d", sep, c, sum.ByClass[c])
		}
		if len(classes) > 0 {
			fmt.Fprint(a.stdout, ")")
		}
		fmt.Fprintln(a.stdout)
		if proc != nil && sum.DeadLettered > 0 {
			fmt.Fprintf(a.stdout, "dead-lettered %d events into %s\n", sum.DeadLettered, broker.Redact(a.storeURL))
		}
	}
	if sum.DeadLettered > 0 {
		return &problemsError{}
	}
	return nil
}

// checkOne checks one event and fills its verdict (all but where it was
// dead-lettered to).
func checkOne(ctx context.Context, checker *spatial.Checker, ev event) checked {
	res, cerr := checker.CheckEventContext(ctx, ev.payload)
	v := verdict{Input: ev.where, EventID: eventIDOf(ev.payload), OK: cerr == nil, EPSG: res.EPSG,
		GeometryType: res.GeometryType, VertexCount: res.VertexCount}
	if cerr == nil {
		return checked{ev: ev, v: v}
	}
	v.FailureClass, v.FailedStage = classify.Classify(cerr).String(), classify.StageOf(cerr).String()
	v.Reason = cerr.Error()
	if d := classify.DetailOf(cerr); d != nil {
		if d.Reason != "" {
			v.Reason = d.Reason
		}
		v.ReasonKind = string(d.Kind)
		if d.Location != nil {
			v.Location = []float64{d.Location[0], d.Location[1]}
		}
		v.Fault = d.Fault
		if d.EPSG != 0 {
			v.EPSG = d.EPSG
		}
	}
	return checked{ev: ev, v: v, cerr: cerr}
}

// splitEvents splits the input into events: the features of a
// FeatureCollection, or JSON lines (blank lines skipped, a trailing \r
// dropped).
func splitEvents(data []byte) ([]event, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) > 0 && trimmed[0] == '{' {
		if s, e, err := jsonscan.Find(data, "/type"); err == nil && string(data[s:e]) == `"FeatureCollection"` {
			return features(data)
		}
	}
	var evs []event
	for i, line := range bytes.Split(data, []byte("\n")) {
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		evs = append(evs, event{where: "line " + strconv.Itoa(i+1), payload: line})
	}
	if len(evs) == 0 {
		return nil, errors.New("no events")
	}
	return evs, nil
}

// features returns a FeatureCollection's features as events, each with
// the collection's crs spliced in when it has none of its own.
func features(data []byte) ([]event, error) {
	s, e, err := jsonscan.Find(data, "/features")
	if err != nil || data[s] != '[' {
		return nil, errors.New("FeatureCollection without a features array")
	}
	var crs []byte
	if cs, ce, err := jsonscan.Find(data, "/crs"); err == nil {
		crs = data[cs:ce]
	}
	arr := data[s:e]
	var evs []event
	i := 1
	for n := 0; ; n++ {
		for i < len(arr) && (arr[i] == ' ' || arr[i] == '\t' || arr[i] == '\n' || arr[i] == '\r' || arr[i] == ',') {
			i++
		}
		if i >= len(arr) || arr[i] == ']' {
			break
		}
		fs, fe, err := jsonscan.Skip(arr, i)
		if err != nil {
			return nil, fmt.Errorf("feature %d: %v", n, err)
		}
		f := arr[fs:fe]
		if crs != nil && f[0] == '{' {
			if _, _, err := jsonscan.Find(f, "/crs"); err != nil {
				g := make([]byte, 0, len(f)+len(crs)+8)
				g = append(append(append(g, `{"crs":`...), crs...), ',')
				if rest := bytes.TrimSpace(f[1:]); len(rest) > 0 && rest[0] == '}' {
					g = g[:len(g)-1]
				}
				f = append(g, f[1:]...)
			}
		}
		evs = append(evs, event{where: "feature " + strconv.Itoa(n), payload: f})
		i = fe
	}
	if len(evs) == 0 {
		return nil, errors.New("the FeatureCollection has no features")
	}
	return evs, nil
}

// eventIDOf returns the payload's event_id or id member, if it has one.
func eventIDOf(p []byte) string {
	for _, path := range []string{"/event_id", "/id", "/properties/event_id"} {
		s, e, err := jsonscan.Find(p, path)
		if err != nil {
			continue
		}
		if p[s] == '"' {
			if v, err := jsonscan.Unquote(p[s:e]); err == nil {
				return v
			}
			continue
		}
		return string(p[s:e])
	}
	return ""
}
