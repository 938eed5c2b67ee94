package replay

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/telemetry"
	"github.com/geodlq/geodlq/offload"
)

// Repair describes what a [Repairer] did to a payload.
type Repair struct {
	// Method names the repair: "make_valid", "reproject", ….
	Method string
	// Detail says more, e.g. "structure" or "EPSG:3857->EPSG:4326".
	Detail string
	// VerticesBefore and VerticesAfter count positions before and after,
	// when the repair knows them.
	VerticesBefore, VerticesAfter int
}

// String renders r for the dlq-repair header: "make_valid:structure 5->7 vertices".
func (r Repair) String() string {
	s := r.Method
	if r.Detail != "" {
		s += ":" + r.Detail
	}
	if r.VerticesBefore != 0 || r.VerticesAfter != 0 {
		s += fmt.Sprintf(" %d->%d vertices", r.VerticesBefore, r.VerticesAfter)
	}
	return s
}

// Repairer repairs the restored payload of a dead-lettered event so that a
// deterministic failure can be replayed (GEOS MakeValid, PROJ
// reprojection; see package spatial). It returns an error wrapping
// [ErrNotRepairable] when it cannot repair this event. Implementations
// must be safe for concurrent use and must not modify payload.
type Repairer interface {
	Repair(ctx context.Context, env *envelope.Envelope, payload []byte) ([]byte, Repair, error)
}

// RepairFunc adapts a function to [Repairer].
type RepairFunc func(ctx context.Context, env *envelope.Envelope, payload []byte) ([]byte, Repair, error)

// Repair calls f.
func (f RepairFunc) Repair(ctx context.Context, env *envelope.Envelope, payload []byte) ([]byte, Repair, error) {
	return f(ctx, env, payload)
}

// ErrNotRepairable is wrapped by repairers that cannot repair an event.
var ErrNotRepairable = errors.New("replay: event not repairable")

// ErrNoRepair is the error of an [Item] left in place because its class is
// deterministic and no Repairer is configured for it (or, for
// schema_violation and resource_exhausted, none may be).
var ErrNoRepair = errors.New("no repair is configured")

// Options configures a [Replayer].
type Options struct {
	// Source is the dead-letter store to read. Required.
	Source broker.DeadLetterSource
	// Target receives the re-injected events. Required.
	Target broker.Publisher
	// Fetcher fetches and verifies offloaded blobs (an
	// *offload.Offloader). Nil: envelopes with offloaded parts fail with
	// OutcomeRestoreFailed.
	Fetcher envelope.Fetcher
	// Repairers maps a deterministic class to the repair that makes its
	// events replayable (invalid_geometry → MakeValid, crs_mismatch →
	// reproject). Events of a deterministic class without a repairer are
	// skipped and stay in the store. schema_violation and
	// resource_exhausted are never replayed automatically, repairer or not.
	Repairers map[classify.Class]Repairer
	// Check, when set, validates a restored (and repaired) payload the way
	// the consumer will: a repaired event is re-injected only if it now
	// passes, and a dry run reports whether each event would pass now (for
	// example spatial.Checker.CheckEvent wrapped to return its error).
	Check func(ctx context.Context, payload []byte) error
	// Route names the destination to re-inject into. Nil means the
	// envelope's source topic.
	Route func(env *envelope.Envelope) (string, error)
	// BatchSize is how many records to lease per fetch. Default 100.
	// The leases of a batch are renewed while it is worked on (see
	// [LeaseKeeper]), so a batch may take longer than a lease.
	BatchSize int
	// BatchBytes bounds a batch by its records' bodies: after a batch,
	// the next asks for as many records as BatchBytes holds at the size
	// of the largest body of the batch before (at least one, at most
	// BatchSize), and a run's first batch is a single record. So a run
	// over large records holds one at a time, and a run over small ones
	// still fetches BatchSize at a time. Default
	// [broker.DefaultListBytes] (16 MiB).
	BatchBytes int
	// Concurrency is how many records of a batch are worked on at once
	// (each restored, repaired, checked, re-injected under its own lease
	// and acknowledged, as one record alone is; when the batch is
	// re-injected together — see [Replayer] — the re-injection and
	// acknowledgement are the batch's, after every record was examined).
	// Records with the same
	// key (the dead-letter message's key: the source event's partition
	// or ordering key, which the re-injection carries) are worked on one
	// after another in the order fetched, so that their re-injections
	// keep their order. The report lists the records in the order
	// fetched whatever the concurrency. Repairers, Check and Target must
	// be safe for concurrent use when it is above 1. Default 1.
	Concurrency int
	// LeaseMargin is how much of a record's lease must be left to start
	// its re-injection, and how long before the lease would end (no
	// renewal having succeeded since) an unfinished re-injection is
	// cancelled (see [LeaseKeeperOptions].Margin). Default a quarter of
	// the lease.
	LeaseMargin time.Duration
	// Logger receives a record per replayed or failed event. Nil discards.
	Logger *slog.Logger
	// Now returns the current time. Nil means time.Now.
	Now func() time.Time
	// MeterProvider records geodlq.replay.outcomes by outcome and class.
	// Nil records nothing.
	MeterProvider metric.MeterProvider
	// TracerProvider traces geodlq.replay.run and, per record,
	// geodlq.replay.record with restore, repair, check and publish
	// events. Nil traces nothing.
	TracerProvider trace.TracerProvider
}

// Replayer re-injects dead-lettered events, exactly once end to end: it
// verifies offloaded blobs, restores the exact original bytes, re-injects
// them with the preserved idempotency key, and acknowledges the dead-letter
// record only after the re-injection is durable. A crash between the two
// re-injects the event again on the next run; the consumer's idempotency
// claim (see [Once]) makes that duplicate harmless.
//
// Replayers running at once — two `geodlq replay`, a console job, a
// cron — never re-inject the same record: a record is re-injected only
// while its lease is provably held. The leases of the batch being worked
// on are renewed in the background (slow repairs, a rate limit, a batch
// outliving its lease), and each re-injection is fenced by a
// [LeaseKeeper]: the lease is renewed, atomically checked and extended at
// the source, just before publishing, and the publish is cancelled if the
// lease comes within LeaseMargin of its end without a renewal. A record
// whose lease was lost is left to its new holder (OutcomeLeaseLost).
//
// When the source renews and acknowledges in batches
// ([broker.BatchSettler]: a [*broker.Store] over PostgreSQL or memory)
// and the target publishes in batches ([broker.Batcher]: any
// [*broker.Store]), a batch's records are re-injected together: the
// leases of those to re-inject are renewed in one call
// ([LeaseKeeper.ActBatch]), they are published with one PublishBatch
// per target in the order fetched while every one of those leases is
// provably held, and those published are acknowledged in one call, each
// fenced by its own lease at the source. That is three round trips (three
// commits for PostgreSQL) for the batch instead of three per record, with
// the same outcomes: a record whose lease is lost is not re-injected; a
// publish cancelled because a lease came too near its end, or that
// failed, leaves every record it carried in place (some may have been
// written: their idempotency keys absorb the duplicate); a record
// re-injected whose acknowledgement fails is OutcomeAckFailed, as alone.
// A wrapper that overrides a source's Renew or Ack must override
// RenewBatch and AckBatch too, or hide them (embed the
// [broker.DeadLetterSource] interface, not the store).
type Replayer struct {
	opts Options
	log  *slog.Logger
	tel  *telemetry.Instruments
}

// New returns a replayer. It fails if opts, opts.Source or opts.Target
// is nil; opts is copied.
func New(opts *Options) (*Replayer, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Source == nil || o.Target == nil {
		return nil, errors.New("replay: Options.Source and Options.Target are required")
	}
	if o.BatchSize <= 0 {
		o.BatchSize = 100
	}
	if o.BatchBytes <= 0 {
		o.BatchBytes = broker.DefaultListBytes
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 1
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Replayer{opts: o, log: log, tel: telemetry.New(o.MeterProvider, o.TracerProvider)}, nil
}

// releaseConcurrency is how many records a run gives back at once when it
// ends.
const releaseConcurrency = 8

// Request says what to replay.
type Request struct {
	// Destination is the dead-letter destination to read, e.g.
	// "spatial.events.poison.dlt".
	Destination string
	// Filter selects records (class, stage, EPSG, time range, event ids).
	Filter broker.Filter
	// DryRun reports what would happen without re-injecting or
	// acknowledging anything.
	DryRun bool
	// Limit stops after this many records were examined. 0: no limit.
	Limit int
}

// Outcome is what happened to one record.
type Outcome string

// The outcomes a [Report] counts.
const (
	// OutcomeReplayed: re-injected unchanged and acknowledged.
	OutcomeReplayed Outcome = "replayed"
	// OutcomeRepaired: repaired, re-injected and acknowledged.
	OutcomeRepaired Outcome = "repaired"
	// OutcomeWouldReplay, OutcomeWouldRepair: dry run, would pass now.
	OutcomeWouldReplay Outcome = "would_replay"
	OutcomeWouldRepair Outcome = "would_repair"
	// OutcomeWouldFail: dry run, the restored payload fails the check now.
	OutcomeWouldFail Outcome = "would_fail"
	// OutcomeSkipped: a deterministic class without a repair; left in place.
	OutcomeSkipped Outcome = "skipped"
	// OutcomeRepairFailed: the repair failed or its result still fails the
	// check; left in place.
	OutcomeRepairFailed Outcome = "repair_failed"
	// OutcomeStillFails: replayable, but the check fails now; left in place.
	OutcomeStillFails Outcome = "still_fails"
	// OutcomeInvalidEnvelope: the record is not a valid dlq.v1 envelope;
	// left in place.
	OutcomeInvalidEnvelope Outcome = "invalid_envelope"
	// OutcomeRestoreFailed: an offloaded blob is missing or fails its hash,
	// or the payload hash does not match; left in place.
	OutcomeRestoreFailed Outcome = "restore_failed"
	// OutcomeNoRoute: no destination to re-inject into; left in place.
	OutcomeNoRoute Outcome = "no_route"
	// OutcomePublishFailed: the re-injection failed; left in place.
	OutcomePublishFailed Outcome = "publish_failed"
	// OutcomeAckFailed: re-injected, but the record could not be
	// acknowledged (it will be replayed again; the idempotency key makes
	// that harmless).
	OutcomeAckFailed Outcome = "ack_failed"
	// OutcomeLeaseLost: the record's lease was lost, or could not be
	// proven held, before its re-injection was known durable: it was not
	// re-injected (or, when the re-injection was cancelled, its outcome is
	// unknown) and not acknowledged; whoever holds it now replays it.
	OutcomeLeaseLost Outcome = "lease_lost"
)

// Outcomes returns every outcome, in the order a report lists them: the
// acknowledged ones, the dry run's, then why records were left in place.
func Outcomes() []Outcome {
	return []Outcome{OutcomeReplayed, OutcomeRepaired, OutcomeWouldReplay, OutcomeWouldRepair,
		OutcomeWouldFail, OutcomeSkipped, OutcomeRepairFailed, OutcomeStillFails, OutcomeInvalidEnvelope,
		OutcomeRestoreFailed, OutcomeNoRoute, OutcomePublishFailed, OutcomeAckFailed, OutcomeLeaseLost}
}

// Item reports one record.
type Item struct {
	RecordID       string
	EventID        string
	IdempotencyKey string
	Class          classify.Class
	Outcome        Outcome
	// Target is where the event was (or would be) re-injected.
	Target string
	// Repair is set when a repair was applied.
	Repair *Repair
	// Err says why the record was left in place.
	Err error
}

// String renders the item on one line for a terminal or a log: record,
// event, class and outcome, the target when there is one, then the repair
// applied or why the record was left in place —
//
//	7 evt-bowtie invalid_geometry repaired -> spatial.events make_valid:structure 5->7 vertices
//	9 evt-3857 crs_mismatch repair_failed: spatial: …
//
// An empty field is "-"; one with spaces, characters that are not
// printable or bytes that are not UTF-8 (an event id is the producer's)
// is quoted, as is such a repair or error text, so that every item stays
// one line of space-separated fields.
func (it Item) String() string {
	var b strings.Builder
	b.WriteString(itemField(it.RecordID))
	b.WriteByte(' ')
	b.WriteString(itemField(it.EventID))
	b.WriteByte(' ')
	if it.Class == "" {
		b.WriteString("-")
	} else {
		b.WriteString(itemField(it.Class.String()))
	}
	b.WriteByte(' ')
	b.WriteString(itemField(string(it.Outcome)))
	if it.Target != "" {
		b.WriteString(" -> ")
		b.WriteString(itemField(it.Target))
	}
	switch {
	case it.Repair != nil:
		b.WriteByte(' ')
		b.WriteString(printable(it.Repair.String()))
	case it.Err != nil:
		b.WriteString(": ")
		b.WriteString(printable(it.Err.Error()))
	}
	return b.String()
}

// itemField is s as one space-free field of [Item.String].
func itemField(s string) string {
	if s == "" {
		return "-"
	}
	if !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return r == ' ' || !strconv.IsPrint(r) }) {
		return strconv.Quote(s)
	}
	return s
}

// printable is s on one line: quoted when it is not UTF-8 or has
// characters that are not printable (a newline would start a line of its
// own).
func printable(s string) string {
	if !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return r != ' ' && !strconv.IsPrint(r) }) {
		return strconv.Quote(s)
	}
	return s
}

// Report counts every outcome of a run.
type Report struct {
	// Examined is the number of records looked at.
	Examined int
	// Counts maps each outcome to its number of records.
	Counts map[Outcome]int
	// Items lists every record, in the order examined.
	Items []Item
	// LeasesLost counts the records whose leases the run lost before it
	// was done with them: a renewal or the release at the end was
	// refused because another holder had taken the record over
	// (OutcomeLeaseLost, or ack_failed for that reason), or a lease
	// lapsed (its renewals failed) and the record came back to the run.
	// Such a record may have been examined or acted on by another
	// replayer; this run acts on no record twice.
	LeasesLost int
	// Incomplete is empty when the run examined every record it was
	// meant to: each record of the destination that matched the filter
	// and was not held by another replayer when the run fetched it, once,
	// up to Request.Limit. Otherwise it says why not — leases were lost
	// (LeasesLost), or the run ended early on an error (the error Run
	// returns) — and the run must be taken as partial: run it again.
	Incomplete string
}

// Summary counts the report's outcomes on one line, in the order of
// [Outcomes], leaving out those that did not occur:
// "replayed=3 skipped=1". An empty report gives "".
func (r Report) Summary() string {
	var b strings.Builder
	for _, o := range Outcomes() {
		if n := r.Counts[o]; n > 0 {
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(string(o))
			b.WriteByte('=')
			b.WriteString(strconv.Itoa(n))
		}
	}
	return b.String()
}

// Acked returns the number of records acknowledged (replayed or repaired).
func (r Report) Acked() int { return r.Counts[OutcomeReplayed] + r.Counts[OutcomeRepaired] }

// Run replays the records of req.Destination that match req.Filter. Records
// that are not re-injected stay leased until the run ends — their leases
// renewed meanwhile, however long the run takes, so that they do not come
// back to it or go to another replayer — and are then released,
// untouched, for a later run or an operator. Each record is examined and
// acted on at most once by a run. Run returns the report so far together
// with an error when ctx ends or the source fails; nothing is
// half-acknowledged. A run that lost leases, or ended early, says so in
// [Report].Incomplete.
func (r *Replayer) Run(ctx context.Context, req Request) (rep Report, err error) {
	ctx, span := r.tel.Start(ctx, "geodlq.replay.run",
		attribute.String("geodlq.destination", req.Destination), attribute.Bool("geodlq.dry_run", req.DryRun))
	defer func() {
		span.SetAttributes(attribute.Int("geodlq.examined", rep.Examined), attribute.Int("geodlq.acked", rep.Acked()),
			attribute.Int("geodlq.leases_lost", rep.LeasesLost), attribute.Bool("geodlq.incomplete", rep.Incomplete != ""))
		telemetry.End(span, err)
	}()
	rep = Report{Counts: map[Outcome]int{}}
	keeper := NewLeaseKeeper(r.opts.Source, &LeaseKeeperOptions{Margin: r.opts.LeaseMargin, Logger: r.log})
	defer keeper.Close()
	// held: the records left in place, by id, as the keeper holds them
	// (their leases alone: see LeaseKeeper.slim), renewed until the run
	// ends. lost: the ids of the records whose leases the run lost
	// before it was done with them.
	held := map[string]*broker.Record{}
	lost := map[string]bool{}
	defer func() {
		// Give back everything we did not acknowledge, even if ctx ended.
		// Several at once: a run that leaves thousands of records in
		// place (skipped classes) would otherwise spend a round trip on
		// each, one after another, after its work is done. A release
		// refused because the lease was lost (a renewal found it taken
		// over, or it lapsed and another holder took the record) counts
		// the record lost.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		recs := make(chan *broker.Record)
		var mu sync.Mutex
		var wg sync.WaitGroup
		for range min(releaseConcurrency, len(held)) {
			wg.Go(func() {
				for rec := range recs {
					err := keeper.Release(rctx, rec)
					switch {
					case errors.Is(err, broker.ErrLeaseLost):
						mu.Lock()
						lost[rec.ID] = true
						mu.Unlock()
					case err != nil:
						r.log.WarnContext(ctx, "geodlq: releasing record after replay", slog.String("record", rec.ID), slog.Any("error", err))
					}
				}
			})
		}
		for _, rec := range held {
			recs <- rec
		}
		close(recs)
		wg.Wait()
		rep.LeasesLost = len(lost)
		switch {
		case err != nil:
			rep.Incomplete = fmt.Sprintf("the run ended early, after %d records: %v", rep.Examined, err)
		case rep.LeasesLost > 0:
			rep.Incomplete = fmt.Sprintf("%d records' leases were lost during the run (another process took them over, or they lapsed): "+
				"records may have been left unexamined; run again", rep.LeasesLost)
		}
		if rep.Incomplete != "" {
			r.log.WarnContext(ctx, "geodlq: replay incomplete", slog.String("destination", req.Destination),
				slog.Int("examined", rep.Examined), slog.Int("leases_lost", rep.LeasesLost), slog.String("why", rep.Incomplete))
		}
	}()
	// keep leaves rec in place until the run ends: its lease (alone, not
	// its body) is renewed meanwhile, and it is released then.
	keep := func(rec *broker.Record) {
		if prev := held[rec.ID]; prev != nil && prev != rec {
			keeper.Drop(prev)
		}
		held[rec.ID] = keeper.slim(rec)
	}
	seen := map[string]bool{}
	n := 1     // the first batch: the records' size is not known yet
	stale := 0 // records come back already examined since the last fresh one
	for {
		if req.Limit > 0 && rep.Examined >= req.Limit {
			return rep, nil
		}
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		if req.Limit > 0 {
			n = min(n, req.Limit-rep.Examined)
		}
		fetched := time.Now()
		recs, err := r.opts.Source.Fetch(ctx, req.Destination, req.Filter, n)
		if err != nil {
			return rep, fmt.Errorf("replay: fetching from %q: %w", req.Destination, err)
		}
		// The batch's leases are renewed until the run ends or each
		// record is settled, dry run or not.
		keeper.Hold(fetched, recs...)
		asked := n
		n = r.nextBatch(recs)
		fresh := 0
		var work []*broker.Record
		for _, rec := range recs {
			if seen[rec.ID] {
				// The record came back, already reported: hold it again.
				// One the run kept in place lost its lease (its renewals
				// failed and it lapsed), and another replayer may have
				// had it meanwhile. (One whose acknowledgement failed was
				// let go of on purpose: ack_failed says so.)
				if held[rec.ID] != nil {
					lost[rec.ID] = true
				}
				keep(rec)
				continue
			}
			seen[rec.ID] = true
			fresh++
			if req.Limit > 0 && rep.Examined+len(work) >= req.Limit {
				keep(rec)
				continue
			}
			work = append(work, rec)
		}
		for i, it := range r.batch(ctx, work, req.DryRun, keeper) {
			rec := work[i]
			// Each record is let go of once examined: one held until the
			// run ends is held by its lease alone, not by its body.
			work[i] = nil
			rep.Examined++
			rep.Counts[it.Outcome]++
			rep.Items = append(rep.Items, it)
			if it.Outcome == OutcomeLeaseLost || (it.Outcome == OutcomeAckFailed && errors.Is(it.Err, broker.ErrLeaseLost)) {
				lost[rec.ID] = true
			}
			switch it.Outcome {
			case OutcomeReplayed, OutcomeRepaired, OutcomeAckFailed:
				// Settled (or, ack_failed, no longer held by the keeper).
			default:
				// Left in place: kept out of this run's later fetches by
				// its lease, renewed until the run ends, then released
				// (a lease lost meanwhile is not: the release fails with
				// ErrLeaseLost, changes nothing, and counts it lost).
				keep(rec)
			}
		}
		// A batch of records already examined (their leases lapsed and
		// they came back; they are held again now) ends the run only when
		// it is not full — there is nothing else to fetch — or when more
		// records have come back since the last fresh one than were
		// examined: every one of them came back, was held again, and the
		// fetch after still found no new record. (Records come oldest
		// first, so the lapsed ones come back before the records not yet
		// examined.) Either way the records that came back count as lost
		// leases: the run reports itself incomplete.
		if fresh > 0 {
			stale = 0
		} else if stale += len(recs); len(recs) < asked || stale > len(seen) {
			return rep, nil
		}
	}
}

// nextBatch is how many records the batch after recs asks for: as many
// as BatchBytes holds at the size of recs' largest body, at least one,
// at most BatchSize.
func (r *Replayer) nextBatch(recs []*broker.Record) int {
	largest := 0
	for _, rec := range recs {
		if rec.Message != nil {
			largest = max(largest, len(rec.Message.Body))
		}
	}
	if largest == 0 {
		return r.opts.BatchSize
	}
	return max(1, min(r.opts.BatchSize, r.opts.BatchBytes/largest))
}

// leaseOnly is what releasing rec needs — its id, destination and lease —
// without its message and envelope, for a record held until the run
// ends.
func leaseOnly(rec *broker.Record) *broker.Record {
	return &broker.Record{ID: rec.ID, Destination: rec.Destination, Deliveries: rec.Deliveries, Lease: rec.Lease, LeaseExpires: rec.LeaseExpires}
}

// batch works on recs, Options.Concurrency at a time, and returns their
// items in the order of recs. Records with the same key go to the same
// lane, worked on in order; the others are spread over the lanes in turn.
func (r *Replayer) batch(ctx context.Context, recs []*broker.Record, dry bool, lk *LeaseKeeper) []Item {
	if !dry && lk != nil && r.batchable(lk) {
		return r.together(ctx, recs, lk)
	}
	items := make([]Item, len(recs))
	r.lanes(recs, func(i int) { items[i] = r.traced(ctx, recs[i], dry, lk) })
	return items
}

// lanes calls fn for each index of recs, Options.Concurrency at a time:
// records with the same key go to the same lane, worked on in order; the
// others are spread over the lanes in turn.
func (r *Replayer) lanes(recs []*broker.Record, fn func(i int)) {
	conc := min(r.opts.Concurrency, len(recs))
	if conc <= 1 {
		for i := range recs {
			fn(i)
		}
		return
	}
	lanes := make([][]int, conc)
	for i, rec := range recs {
		lane := i % conc
		if rec.Message != nil && len(rec.Message.Key) > 0 {
			h := fnv.New32a()
			_, _ = h.Write(rec.Message.Key)
			lane = int(h.Sum32() % uint32(conc))
		}
		lanes[lane] = append(lanes[lane], i)
	}
	var wg sync.WaitGroup
	for _, lane := range lanes {
		if len(lane) == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, i := range lane {
				fn(i)
			}
		}()
	}
	wg.Wait()
}

// batchable reports whether a batch's records can be re-injected
// together: the source renews and acknowledges in batches
// ([broker.BatchSettler], and has not answered errors.ErrUnsupported)
// and the target publishes in batches ([broker.Batcher]).
func (r *Replayer) batchable(lk *LeaseKeeper) bool {
	_, settles := r.opts.Source.(broker.BatchSettler)
	_, publishes := r.opts.Target.(broker.Batcher)
	return settles && publishes && !lk.noBatch.Load()
}

// together works on recs as a batch: each record is examined (restored,
// repaired, checked) as one alone is, Options.Concurrency at a time;
// then the leases of those to re-inject are renewed in one call, they
// are re-injected in one PublishBatch per target (in the order fetched,
// so records with the same key keep their order) while every lease is
// provably held ([LeaseKeeper.ActBatch]), and those re-injected are
// acknowledged in one call, each fenced by its own lease. Three round
// trips for the batch instead of three per record; the outcomes are
// those of one record alone.
func (r *Replayer) together(ctx context.Context, recs []*broker.Record, lk *LeaseKeeper) []Item {
	items := make([]Item, len(recs))
	msgs := make([]*broker.Message, len(recs))
	ctxs := make([]context.Context, len(recs))
	spans := make([]trace.Span, len(recs))
	r.lanes(recs, func(i int) {
		ctxs[i], spans[i] = r.tel.Start(ctx, "geodlq.replay.record", attribute.String("geodlq.record", recs[i].ID))
		items[i], msgs[i] = r.prepare(ctxs[i], recs[i], false, lk)
	})
	defer func() {
		for i, it := range items {
			r.recorded(ctxs[i], spans[i], it)
		}
	}()
	var pub []int
	var prs []*broker.Record
	for i, m := range msgs {
		if m != nil {
			pub, prs = append(pub, i), append(prs, recs[i])
		}
	}
	if len(pub) == 0 {
		return items
	}
	errs := lk.ActBatch(ctx, prs, func(ctx context.Context, held []int) []error {
		out := make([]error, len(held))
		// One PublishBatch per target, the targets in the order first
		// met, each target's messages in the order fetched.
		var targets []string
		byTarget := map[string][]int{} // target → indexes into held
		for j, h := range held {
			i := pub[h]
			t := items[i].Target
			if _, ok := byTarget[t]; !ok {
				targets = append(targets, t)
			}
			byTarget[t] = append(byTarget[t], j)
			trace.SpanFromContext(ctxs[i]).AddEvent("publish", trace.WithAttributes(attribute.String("geodlq.target", t)))
		}
		for _, t := range targets {
			js := byTarget[t]
			ms := make([]*broker.Message, len(js))
			for k, j := range js {
				ms[k] = msgs[pub[held[j]]]
			}
			err := r.publishBatch(ctx, t, ms)
			for _, j := range js {
				out[j] = err
			}
		}
		return out
	})
	var acks []int
	var ars []*broker.Record
	for j, i := range pub {
		if err := errs[j]; err != nil {
			r.publishFailed(ctxs[i], recs[i], &items[i], err)
			continue
		}
		acks, ars = append(acks, i), append(ars, recs[i])
	}
	if len(acks) == 0 {
		return items
	}
	// The re-injections are durable: acknowledge even if ctx ends now
	// (Ctrl-C), so an interrupted run leaves nothing half done.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	for j, err := range lk.AckBatch(actx, ars) {
		i := acks[j]
		r.acked(ctxs[i], recs[i], &items[i], err)
	}
	return items
}

// publishBatch re-injects ms into target at once when the target
// publishes in batches, one at a time otherwise.
func (r *Replayer) publishBatch(ctx context.Context, target string, ms []*broker.Message) error {
	if b, ok := r.opts.Target.(broker.Batcher); ok {
		return b.PublishBatch(ctx, target, ms)
	}
	for _, m := range ms {
		if err := r.opts.Target.Publish(ctx, target, m); err != nil {
			return err
		}
	}
	return nil
}

func (r *Replayer) traced(ctx context.Context, rec *broker.Record, dry bool, lk *LeaseKeeper) Item {
	ctx, span := r.tel.Start(ctx, "geodlq.replay.record", attribute.String("geodlq.record", rec.ID))
	it := r.one(ctx, rec, dry, lk)
	r.recorded(ctx, span, it)
	return it
}

// recorded ends a record's span and counts its outcome.
func (r *Replayer) recorded(ctx context.Context, span trace.Span, it Item) {
	span.SetAttributes(attribute.String("geodlq.outcome", string(it.Outcome)), attribute.String("geodlq.class", it.Class.String()))
	if it.Repair != nil {
		span.SetAttributes(attribute.String("geodlq.repair", it.Repair.Method))
	}
	telemetry.End(span, it.Err)
	r.tel.ReplayOutcomes.Add(ctx, 1, metric.WithAttributes(
		attribute.String("outcome", string(it.Outcome)), attribute.String("class", classLabel(it.Class))))
}

func classLabel(c classify.Class) string {
	if c.Valid() {
		return c.String()
	}
	return "none"
}

// one examines rec and, unless dry, re-injects it through lk.
func (r *Replayer) one(ctx context.Context, rec *broker.Record, dry bool, lk *LeaseKeeper) Item {
	it, msg := r.prepare(ctx, rec, dry, lk)
	if msg == nil {
		return it
	}
	trace.SpanFromContext(ctx).AddEvent("publish", trace.WithAttributes(attribute.String("geodlq.target", it.Target)))
	// The re-injection runs only while the record's lease is provably
	// held, and is cancelled if that stops being so.
	if err := lk.Act(ctx, rec, func(ctx context.Context) error { return r.opts.Target.Publish(ctx, it.Target, msg) }); err != nil {
		r.publishFailed(ctx, rec, &it, err)
		return it
	}
	// The re-injection is durable: acknowledge even if ctx ends now (Ctrl-C),
	// so an interrupted run leaves nothing half done.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	r.acked(ctx, rec, &it, lk.Ack(actx, rec))
	return it
}

// prepare examines rec: it returns its item, final, and a nil message
// when rec is not to be re-injected (or dry); otherwise the message to
// re-inject into it.Target.
func (r *Replayer) prepare(ctx context.Context, rec *broker.Record, dry bool, lk *LeaseKeeper) (Item, *broker.Message) {
	it := Item{RecordID: rec.ID}
	if lk != nil {
		// A record whose lease was lost while it waited its turn is
		// someone else's: not even looked at.
		if err := lk.Lost(rec); err != nil {
			it.Outcome, it.Err = OutcomeLeaseLost, err
			return it, nil
		}
	}
	env := rec.Envelope
	if env == nil {
		var err error
		if env, err = envelope.Decode(rec.Message.Body); err != nil {
			it.Outcome, it.Err = OutcomeInvalidEnvelope, err
			return it, nil
		}
	}
	it.EventID, it.IdempotencyKey, it.Class = env.EventID, env.IdempotencyKey, env.FailureClass

	var repairer Repairer
	if env.FailureClass.Deterministic() {
		switch env.FailureClass {
		case classify.ClassSchemaViolation, classify.ClassResourceExhausted:
		default:
			repairer = r.opts.Repairers[env.FailureClass]
		}
		if repairer == nil {
			it.Outcome = OutcomeSkipped
			it.Err = fmt.Errorf("replay: %s is deterministic and %w for it", env.FailureClass, ErrNoRepair)
			return it, nil
		}
	}

	trace.SpanFromContext(ctx).AddEvent("restore")
	payload, err := env.Restore(ctx, r.opts.Fetcher)
	if err != nil {
		it.Outcome, it.Err = OutcomeRestoreFailed, err
		r.log.ErrorContext(ctx, "geodlq: restore failed; record left in place",
			slog.String("event_id", env.EventID), slog.String("record", rec.ID), slog.Any("error", err))
		return it, nil
	}

	if repairer != nil {
		trace.SpanFromContext(ctx).AddEvent("repair")
		fixed, rp, err := repairer.Repair(ctx, env, payload)
		if err != nil {
			it.Outcome, it.Err = OutcomeRepairFailed, err
			if dry {
				it.Outcome = OutcomeWouldFail
			}
			return it, nil
		}
		payload, it.Repair = fixed, &rp
	}

	if r.opts.Check != nil {
		if err := r.opts.Check(ctx, payload); err != nil {
			it.Err = err
			switch {
			case dry:
				it.Outcome = OutcomeWouldFail
			case repairer != nil:
				it.Outcome = OutcomeRepairFailed
			default:
				// A transient or unknown failure that is not a validation
				// problem may still pass downstream; only a deterministic
				// verdict keeps it here.
				if classify.Classify(err).Deterministic() {
					it.Outcome = OutcomeStillFails
				}
			}
			if it.Outcome != "" {
				return it, nil
			}
			it.Err = nil
		}
	}

	target, err := r.route(env)
	if err != nil {
		it.Outcome, it.Err = OutcomeNoRoute, err
		return it, nil
	}
	it.Target = target
	if dry {
		it.Outcome = OutcomeWouldReplay
		if it.Repair != nil {
			it.Outcome = OutcomeWouldRepair
		}
		return it, nil
	}

	msg := &broker.Message{Body: payload, Headers: map[string]string{
		broker.HeaderIdempotencyKey: env.IdempotencyKey,
		broker.HeaderEventID:        env.EventID,
		broker.HeaderFirstSeenAt:    env.FirstSeenAt.UTC().Format(time.RFC3339Nano),
		broker.HeaderReplayOf:       rec.Destination + "/" + rec.ID,
	}}
	if env.IdempotencyKeyDerived {
		msg.Headers[broker.HeaderIdempotencyKeyDerived] = "true"
	}
	if env.Source != nil {
		msg.Key = env.Source.Key
	}
	if it.Repair != nil {
		msg.Headers[broker.HeaderRepaired] = "true"
		msg.Headers[broker.HeaderRepair] = it.Repair.String()
	}
	return it, msg
}

// publishFailed sets it's outcome for a re-injection that failed with err.
func (r *Replayer) publishFailed(ctx context.Context, rec *broker.Record, it *Item, err error) {
	it.Outcome, it.Err = OutcomePublishFailed, err
	if errors.Is(err, ErrNotHeld) {
		it.Outcome = OutcomeLeaseLost
		r.log.WarnContext(ctx, "geodlq: lease not provably held; record left to its holder, not re-injected by this run",
			slog.String("event_id", it.EventID), slog.String("record", rec.ID), slog.Any("error", err))
		return
	}
	r.log.ErrorContext(ctx, "geodlq: re-inject failed; record left in place",
		slog.String("event_id", it.EventID), slog.String("target", it.Target), slog.Any("error", err))
}

// acked sets it's outcome for a re-injected record whose acknowledgement
// ended with err.
func (r *Replayer) acked(ctx context.Context, rec *broker.Record, it *Item, err error) {
	if err != nil {
		it.Outcome, it.Err = OutcomeAckFailed, err
		r.log.WarnContext(ctx, "geodlq: re-injected but not acknowledged; the idempotency key absorbs the duplicate",
			slog.String("event_id", it.EventID), slog.String("record", rec.ID), slog.Any("error", err))
		return
	}
	it.Outcome = OutcomeReplayed
	if it.Repair != nil {
		it.Outcome = OutcomeRepaired
	}
	r.log.InfoContext(ctx, "geodlq: replayed event",
		slog.String("event_id", it.EventID), slog.String("idempotency_key", it.IdempotencyKey),
		slog.String("target", it.Target), slog.String("outcome", string(it.Outcome)))
}

func (r *Replayer) route(env *envelope.Envelope) (string, error) {
	if r.opts.Route != nil {
		return r.opts.Route(env)
	}
	if env.Source == nil || env.Source.Topic == "" {
		return "", fmt.Errorf("replay: envelope %s has no source topic to re-inject into; set Options.Route", env.EventID)
	}
	return env.Source.Topic, nil
}

// compile-time check that the offloader can serve as the fetcher.
var _ envelope.Fetcher = (*offload.Offloader)(nil)
