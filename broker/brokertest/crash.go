package brokertest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/replay"
)

// The crash-safety test injects faults at every step of the dead-letter path
// and of replay, over at least 1,000 events, and counts.
//
// Phase 1, the consumer: events come from a source queue kept by the test;
// a broker.Processor dead-letters them into the adapter's store. On an
// event's first delivery the test fails the dead-letter write before it
// reaches the store, fails it after the store accepted it (a lost response),
// cancels the consumer's context mid-processing (shutdown), loses the source
// ack after the Processor said Ack (the consumer dies between the two), or
// kills the whole consumer (its store handle stops answering; a new one is
// opened with Reopen). Invariant, checked at every source ack: an event is
// acknowledged at its source only once its envelope is durably in the store.
//
// Phase 2, the replayer and the consumer of the re-injected events: the
// replayer reads the store through a handle that fails a fetch, kills the
// replayer after a re-inject and before the dead-letter ack, or loses the
// ack's response; the re-inject itself fails or loses its response; the
// consumer of re-injected events dies inside its idempotency claim (claimed,
// no side effect), or after completing the claim but before acknowledging
// the message. Invariant, checked at every dead-letter ack: a record is
// acknowledged only once its event is durably re-injected. At the end every
// event's side effect has run exactly once, as the claims store shows, and
// the dead-letter destination is empty.

// crashFault is what happens to an event on its first delivery.
type crashFault int

const (
	faultNone crashFault = iota
	// Phase 1.
	faultDLWriteFails         // the dead-letter write fails before reaching the store
	faultDLResponseLost       // the store accepts the write, the Processor sees an error
	faultShutdown             // the consumer's context ends while processing
	faultSourceAckLost        // the Processor says Ack; the consumer dies before acking
	faultKillConsumer         // the consumer dies after the write; a new one takes over
	faultHandlerSucceeds      // not a fault: the event is processed, never dead-lettered
	faultReinjectFails        // replay: the re-inject fails
	faultReinjectResponseLost // replay: the target accepts it, the replayer sees an error
	faultKillBeforeDLAck      // replay: the replayer dies after the re-inject, before the ack
	faultDLAckResponseLost    // replay: the store acks, the replayer sees an error
	faultCrashInsideClaim     // consumer of re-injected events: claimed, then dies
	faultCrashAfterComplete   // consumer of re-injected events: completed, dies before ack
)

var errInjected = errors.New("brokertest: injected fault")

// phase1Fault and phase2Fault spread the faults over the events.
func phase1Fault(i int) crashFault {
	if i%250 == 125 {
		return faultKillConsumer
	}
	switch i % 8 {
	case 1:
		return faultDLWriteFails
	case 2:
		return faultDLResponseLost
	case 3:
		return faultShutdown
	case 4:
		return faultSourceAckLost
	case 7:
		if i%16 == 15 {
			return faultHandlerSucceeds
		}
	}
	return faultNone
}

func phase2Fault(i int) crashFault {
	if i%300 == 150 {
		return faultKillBeforeDLAck
	}
	switch i % 9 {
	case 1:
		return faultReinjectFails
	case 2:
		return faultReinjectResponseLost
	case 4:
		return faultDLAckResponseLost
	case 5:
		return faultCrashInsideClaim
	case 6:
		return faultCrashAfterComplete
	}
	return faultNone
}

// crashEvent is one event of the test.
type crashEvent struct {
	i     int
	key   string
	msg   *broker.Message
	acked bool // at the source
}

// durableSet records which idempotency keys a store or target durably holds.
type durableSet struct {
	mu   sync.Mutex
	keys map[string]int
}

func (s *durableSet) add(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keys == nil {
		s.keys = map[string]int{}
	}
	s.keys[key]++
}

func (s *durableSet) has(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys[key] > 0
}

// faultStore wraps a store handle. It injects the faults planned for each
// key once, and once killed it answers every call with an error without
// touching the store, as a dead process would.
type faultStore struct {
	*broker.Store
	dead    atomic.Bool
	durable *durableSet // keys whose write the store accepted
	dlAcked *durableSet // keys whose dead-letter record was acknowledged
	plan    func(key string) crashFault
	fired   *sync.Map // key+fault → struct{}, shared by every handle
}

func (f *faultStore) once(key string, fault crashFault) bool {
	if key == "" || f.plan(key) != fault {
		return false
	}
	_, loaded := f.fired.LoadOrStore(key+"/"+strconv.Itoa(int(fault)), struct{}{})
	return !loaded
}

func (f *faultStore) kill() { f.dead.Store(true) }

func (f *faultStore) check() error {
	if f.dead.Load() {
		return fmt.Errorf("%w: this handle's process was killed", errInjected)
	}
	return nil
}

func (f *faultStore) MaxMessageBytes(destination string) int {
	return f.Store.MaxMessageBytes(destination)
}

func (f *faultStore) Publish(ctx context.Context, destination string, m *broker.Message) error {
	if err := f.check(); err != nil {
		return err
	}
	key := m.Header(broker.HeaderIdempotencyKey)
	if f.once(key, faultDLWriteFails) {
		return fmt.Errorf("%w: dead-letter write refused", errInjected)
	}
	if err := f.Store.Publish(ctx, destination, m); err != nil {
		return err
	}
	f.durable.add(key)
	if f.once(key, faultDLResponseLost) {
		return fmt.Errorf("%w: dead-letter write accepted, response lost", errInjected)
	}
	return nil
}

func (f *faultStore) Fetch(ctx context.Context, destination string, flt broker.Filter, max int) ([]*broker.Record, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	return f.Store.Fetch(ctx, destination, flt, max)
}

func (f *faultStore) Ack(ctx context.Context, r *broker.Record) error {
	if err := f.check(); err != nil {
		return err
	}
	key := r.Message.Header(broker.HeaderIdempotencyKey)
	if f.once(key, faultKillBeforeDLAck) {
		f.kill()
		return f.check()
	}
	if err := f.Store.Ack(ctx, r); err != nil {
		return err
	}
	f.dlAcked.add(key)
	if f.once(key, faultDLAckResponseLost) {
		return fmt.Errorf("%w: ack done, response lost", errInjected)
	}
	return nil
}

func (f *faultStore) Release(ctx context.Context, r *broker.Record) error {
	if err := f.check(); err != nil {
		return err
	}
	return f.Store.Release(ctx, r)
}

// Renew renews r's lease while this handle's process lives: a killed
// replayer's leases lapse.
func (f *faultStore) Renew(ctx context.Context, r *broker.Record) error {
	if err := f.check(); err != nil {
		return err
	}
	return f.Store.Renew(ctx, r)
}

// targetQueue is where replay re-injects: a queue kept by the test, with
// un-acknowledged messages redelivered.
type targetQueue struct {
	// replayer is the handle of the replayer publishing here: when it is
	// killed, its process publishes nothing more.
	replayer atomic.Pointer[faultStore]
	mu       sync.Mutex
	msgs     []*broker.Message
	durable  *durableSet
	plan     func(key string) crashFault
	fired    *sync.Map
	received int
}

func (q *targetQueue) Publish(ctx context.Context, destination string, m *broker.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if r := q.replayer.Load(); r != nil {
		if err := r.check(); err != nil {
			return err
		}
	}
	key := m.Header(broker.HeaderIdempotencyKey)
	if q.plan(key) == faultReinjectFails {
		if _, loaded := q.fired.LoadOrStore(key+"/reinject-fails", struct{}{}); !loaded {
			return fmt.Errorf("%w: re-inject refused", errInjected)
		}
	}
	q.mu.Lock()
	q.msgs = append(q.msgs, m.Clone())
	q.received++
	q.mu.Unlock()
	q.durable.add(key)
	if q.plan(key) == faultReinjectResponseLost {
		if _, loaded := q.fired.LoadOrStore(key+"/reinject-lost", struct{}{}); !loaded {
			return fmt.Errorf("%w: re-inject accepted, response lost", errInjected)
		}
	}
	return nil
}

func (q *targetQueue) take() []*broker.Message {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.msgs
	q.msgs = nil
	return out
}

func (q *targetQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.msgs)
}

func (q *targetQueue) putBack(m *broker.Message) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.msgs = append(q.msgs, m)
}

func crashEvents(n int, d string) []*crashEvent {
	evs := make([]*crashEvent, n)
	for i := range n {
		body := fmt.Appendf(nil, `{"event_id":"crash-%d", "crs":"EPSG:4326","geometry":{"type":"Point","coordinates":[%d.5,1.25]}}`, i, i%180)
		key := replay.NewKey("brokertest-crash", []byte(d), []byte(strconv.Itoa(i)))
		evs[i] = &crashEvent{i: i, key: key, msg: &broker.Message{
			Key:     []byte("entity-" + strconv.Itoa(i%13)),
			Body:    body,
			Headers: map[string]string{broker.HeaderIdempotencyKey: key},
			Source:  &envelope.Source{System: "brokertest", Topic: "crash.source", Offset: ptr(int64(i))},
		}}
	}
	return evs
}

// crashHandlerErr is the failure of event i: poison (invalid geometry),
// transient with its budget spent, or unknown.
func crashHandlerErr(i int) error {
	switch i % 3 {
	case 0:
		return classify.WithStage(classify.InvalidGeometry(errors.New("Self-intersection[0.5 0.5]")), classify.StageTopologyValidation)
	case 1:
		return classify.Transient(errors.New("connection reset by peer"))
	default:
		return errors.New("something unexpected")
	}
}

func testCrashSafety(t *testing.T, h Harness) {
	unsupported(t, h, CapRedelivery)
	caps := h.Capabilities()
	require.Positive(t, caps.LeaseExpiry, "harness must declare LeaseExpiry")
	n := max(caps.CrashEvents, 1000)
	d := dest(t, "crash")
	evs := crashEvents(n, d)
	byKey := make(map[string]*crashEvent, n)
	for _, ev := range evs {
		byKey[ev.key] = ev
	}
	plan1 := func(key string) crashFault {
		if ev := byKey[key]; ev != nil {
			return phase1Fault(ev.i)
		}
		return faultNone
	}
	plan2 := func(key string) crashFault {
		if ev := byKey[key]; ev != nil {
			return phase2Fault(ev.i)
		}
		return faultNone
	}
	fired := &sync.Map{}
	inStore := &durableSet{}
	dlAcked := &durableSet{}

	// Phase 1: the consumer dead-letters every failing event, through
	// faults, until every event is acknowledged at its source.
	handle := func(plan func(string) crashFault) *faultStore {
		return &faultStore{Store: reopen(t, h), durable: inStore, dlAcked: dlAcked, plan: plan, fired: fired}
	}
	newConsumer := func() (*faultStore, *broker.Processor) {
		fs := handle(plan1)
		proc, err := broker.NewProcessor(&broker.ProcessorOptions{
			Publisher:   fs,
			Policy:      classify.Policy{MaxAttempts: 2, Rand: func() float64 { return 0 }},
			Destination: func(*broker.Message, classify.Route) string { return d },
			Sleep:       func(context.Context, time.Duration) error { return nil },
		})
		require.NoError(t, err)
		return fs, proc
	}
	consumer, proc := newConsumer()
	var deadLettered, processed int
	for round := 0; ; round++ {
		require.Less(t, round, 10, "the consumer converges")
		pending := 0
		for _, ev := range evs {
			if ev.acked {
				continue
			}
			pending++
			if consumer.dead.Load() {
				consumer, proc = newConsumer() // the killed consumer's replacement
			}
			ctx, cancel := context.WithCancel(context.Background())
			first := !ev.acked && consumer.once(ev.key, faultShutdown)
			out, err := proc.Process(ctx, ev.msg.Clone(), func(ctx context.Context, m *broker.Message) error {
				if phase1Fault(ev.i) == faultHandlerSucceeds {
					return nil
				}
				if first {
					cancel() // shutdown arrives while the handler runs
					return ctx.Err()
				}
				return crashHandlerErr(ev.i)
			})
			cancel()
			if err != nil {
				require.ErrorIs(t, err, broker.ErrNotAcked, "event %d: a failed outcome says do not ack", ev.i)
				require.False(t, out.Ack, "event %d", ev.i)
				continue
			}
			require.True(t, out.Ack, "event %d: nil error means ack", ev.i)
			if consumer.once(ev.key, faultSourceAckLost) {
				continue // the consumer died before acking the source
			}
			if out.DeadLettered && consumer.once(ev.key, faultKillConsumer) {
				consumer.kill()
				continue
			}
			// The invariant, at the moment of the source ack.
			if !out.Processed {
				require.True(t, out.DeadLettered, "event %d", ev.i)
				require.True(t, inStore.has(ev.key), "event %d acknowledged at its source before its envelope was durable", ev.i)
				deadLettered++
			} else {
				processed++
			}
			ev.acked = true
		}
		if pending == 0 {
			break
		}
	}
	var failing []*crashEvent
	for _, ev := range evs {
		if phase1Fault(ev.i) != faultHandlerSucceeds {
			failing = append(failing, ev)
		}
	}
	require.Equal(t, len(failing), deadLettered, "every failing event was dead-lettered and acked once")
	require.Equal(t, n-len(failing), processed)

	// Phase 2: replay through faults until every event's side effect ran and
	// the dead-letter destination is empty.
	claims := replay.NewMemClaims(nil)
	const claimTTL = 50 * time.Millisecond
	reinjected := &durableSet{}
	target := &targetQueue{durable: reinjected, plan: plan2, fired: fired}
	var sideMu sync.Mutex
	sideEffects := map[string]int{}
	repaired := map[string]bool{}
	consume := func() {
		for _, m := range target.take() {
			key := m.Header(broker.HeaderIdempotencyKey)
			ev := byKey[key]
			require.NotNil(t, ev, "re-injected message carries a known idempotency key %q", key)
			require.Equal(t, string(ev.msg.Body), string(m.Body), "event %d restored byte for byte", ev.i)
			if phase2Fault(ev.i) == faultCrashInsideClaim {
				if _, loaded := fired.LoadOrStore(key+"/inside-claim", struct{}{}); !loaded {
					_, st, err := claims.Claim(context.Background(), key, claimTTL)
					require.NoError(t, err)
					require.Equal(t, replay.StatusAcquired, st)
					target.putBack(m) // died holding the claim: the message comes back
					continue
				}
			}
			res, err := replay.Once(context.Background(), claims, key, claimTTL, func(context.Context) error {
				sideMu.Lock()
				defer sideMu.Unlock()
				sideEffects[key]++
				repaired[key] = m.Header(broker.HeaderRepaired) == "true"
				return nil
			})
			if errors.Is(err, replay.ErrInProgress) {
				target.putBack(m) // a dead holder's claim has not lapsed yet
				continue
			}
			require.NoError(t, err, "event %d", ev.i)
			_ = res
			if phase2Fault(ev.i) == faultCrashAfterComplete {
				if _, loaded := fired.LoadOrStore(key+"/after-complete", struct{}{}); !loaded {
					target.putBack(m) // completed, died before the ack
					continue
				}
			}
		}
	}
	noop := replay.RepairFunc(func(_ context.Context, _ *envelope.Envelope, p []byte) ([]byte, replay.Repair, error) {
		return p, replay.Repair{Method: "brokertest_noop"}, nil
	})
	fetchFailed := false
	deadline := time.Now().Add(3*time.Minute + 20*caps.LeaseExpiry)
	quiet := 0
	var src *faultStore
	for round := 0; ; round++ {
		require.True(t, time.Now().Before(deadline), "replay converges (round %d, %d/%d side effects)", round, len(sideEffects), len(failing))
		if src == nil || src.dead.Load() {
			src = handle(plan2) // a new replayer process
		}
		target.replayer.Store(src)
		var opts replay.Options
		opts.Source, opts.Target = src, target
		opts.Route = func(*envelope.Envelope) (string, error) { return "crash.target", nil }
		opts.Repairers = map[classify.Class]replay.Repairer{classify.ClassInvalidGeometry: noop}
		opts.BatchSize = 50
		r, err := replay.New(&opts)
		require.NoError(t, err)
		var rep replay.Report
		if !fetchFailed {
			// The first fetch of the first run fails: nothing may change.
			fetchFailed = true
			src.kill() // the replayer's process dies at its first fetch
			rep, err = r.Run(context.Background(), replay.Request{Destination: d})
			require.ErrorIs(t, err, errInjected)
			require.Zero(t, rep.Examined)
			continue
		}
		rep, err = r.Run(context.Background(), replay.Request{Destination: d})
		if err != nil {
			require.ErrorIs(t, err, errInjected, "round %d: only injected faults stop a run", round)
		}
		for _, it := range rep.Items {
			switch it.Outcome {
			case replay.OutcomeReplayed, replay.OutcomeRepaired, replay.OutcomeAckFailed, replay.OutcomePublishFailed,
				// A lease that could not be renewed in time (a slow
				// machine) or whose handle's process was killed: left
				// for a later round.
				replay.OutcomeLeaseLost:
			default:
				t.Fatalf("round %d: record %s: unexpected outcome %s: %v", round, it.RecordID, it.Outcome, it.Err)
			}
		}
		// The invariant, for every acknowledged dead-letter record.
		dlAcked.mu.Lock()
		for key := range dlAcked.keys {
			require.True(t, reinjected.has(key), "dead-letter record of %q acknowledged before its re-inject was durable", key)
		}
		dlAcked.mu.Unlock()
		// The consumer of re-injected events; a claim left by a dead
		// holder lapses after claimTTL.
		for range 4 {
			consume()
			if target.len() == 0 {
				break
			}
			time.Sleep(claimTTL + 10*time.Millisecond)
		}
		sideMu.Lock()
		done := len(sideEffects)
		sideMu.Unlock()
		if done == len(failing) && rep.Examined == 0 {
			// Nothing visible: wait out any lease a killed replayer held,
			// then look once more.
			quiet++
			if quiet >= 2 {
				break
			}
			time.Sleep(caps.LeaseExpiry + caps.LeaseExpiry/2)
			continue
		}
		quiet = 0
		if rep.Examined == 0 {
			time.Sleep(caps.LeaseExpiry / 2)
		}
	}

	// Count: every failing event's side effect ran exactly once, and the
	// claims store agrees; poison events came back tagged as repaired.
	require.Empty(t, target.take(), "the consumer acknowledged every re-injected message")
	require.Len(t, sideEffects, len(failing))
	for _, ev := range failing {
		require.Equal(t, 1, sideEffects[ev.key], "event %d: side effect ran exactly once", ev.i)
		require.Equal(t, 1, claims.Completions(ev.key), "event %d: claims store shows one completion", ev.i)
		require.Equal(t, ev.i%3 == 0, repaired[ev.key], "event %d: repaired tag", ev.i)
		require.True(t, reinjected.has(ev.key))
	}
	require.Greater(t, target.received, len(failing), "faults produced duplicate re-injects, which the claims absorbed")
	require.Empty(t, drain(t, reopen(t, h), d, broker.Filter{}), "the dead-letter destination is empty")
	writes := 0
	for _, c := range inStore.keys {
		writes += c
	}
	injected := 0
	fired.Range(func(any, any) bool { injected++; return true })
	t.Logf("crash safety: %d events, %d dead-lettered with %d durable writes, %d re-injects, %d faults injected; every side effect ran once",
		n, len(failing), writes, target.received, injected)
}
