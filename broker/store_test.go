package broker_test

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/classify"
)

// slowDriver is a driver whose writes take a while and that ignores
// filters, to exercise what the portable Store adds.
type slowDriver struct {
	mu        sync.Mutex
	writeTime time.Duration
	stored    []*broker.Message
	leased    map[string]bool
	released  []string
	closed    atomic.Int32
	sawCancel atomic.Bool
	limit     int
}

func (d *slowDriver) Publish(ctx context.Context, _ string, m *broker.Message) error {
	select {
	case <-ctx.Done():
		d.sawCancel.Store(true)
		return ctx.Err()
	case <-time.After(d.writeTime):
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stored = append(d.stored, m.Clone())
	return nil
}

func (d *slowDriver) Fetch(_ context.Context, dest string, _ broker.Filter, max int) ([]*broker.Record, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []*broker.Record
	for i, m := range d.stored {
		id := strconv.Itoa(i)
		if d.leased[id] || len(out) == max {
			continue
		}
		d.leased[id] = true
		out = append(out, &broker.Record{ID: id, Destination: dest, Message: m.Clone(), Lease: "l" + id})
	}
	return out, nil
}

func (d *slowDriver) Ack(context.Context, *broker.Record) error { return nil }

func (d *slowDriver) Renew(_ context.Context, r *broker.Record) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.leased[r.ID] {
		return broker.ErrLeaseLost
	}
	r.LeaseExpires = time.Now().Add(time.Minute)
	return nil
}

func (d *slowDriver) Release(_ context.Context, r *broker.Record) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.leased, r.ID)
	d.released = append(d.released, r.ID)
	return nil
}

func (d *slowDriver) Close() error { d.closed.Add(1); return nil }

func (d *slowDriver) MaxMessageBytes(string) int { return d.limit }

func newSlow(write time.Duration, opts *broker.StoreOptions) (*broker.Store, *slowDriver) {
	d := &slowDriver{writeTime: write, leased: map[string]bool{}}
	return broker.NewStore("slow", d, opts), d
}

func TestStoreCancelledWriteKeepsItsOutcome(t *testing.T) {
	s, d := newSlow(50*time.Millisecond, &broker.StoreOptions{CancelGrace: time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(10*time.Millisecond, cancel)
	err := s.Publish(ctx, "d", &broker.Message{Body: []byte("x")})
	require.NoError(t, err, "the write started: the caller gets its true outcome, success")
	require.False(t, d.sawCancel.Load(), "the driver never saw the caller's cancellation")
	require.Len(t, d.stored, 1)

	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, s.Publish(ctx, "d", &broker.Message{Body: []byte("y")}), context.Canceled, "a write not started is refused")
	require.Len(t, d.stored, 1)
}

func TestStoreCancelGraceExpires(t *testing.T) {
	s, d := newSlow(300*time.Millisecond, &broker.StoreOptions{CancelGrace: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(10*time.Millisecond, cancel)
	err := s.Publish(ctx, "d", &broker.Message{Body: []byte("x")})
	require.ErrorIs(t, err, broker.ErrOutcomeUnknown)
	require.ErrorIs(t, err, context.Canceled)
	require.True(t, d.sawCancel.Load(), "past the grace the write is cancelled")
	require.Empty(t, d.stored)
	require.NoError(t, s.Close())
	require.Equal(t, int32(1), d.closed.Load())
}

func TestStoreWriteTimeout(t *testing.T) {
	s, _ := newSlow(time.Second, &broker.StoreOptions{WriteTimeout: 20 * time.Millisecond})
	err := s.Publish(context.Background(), "d", &broker.Message{})
	require.ErrorIs(t, err, broker.ErrOutcomeUnknown)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestStoreArguments(t *testing.T) {
	s, d := newSlow(0, nil)
	d.limit = 4
	ctx := context.Background()
	for _, dest := range []string{"", "a\x00b", "tab\there", string([]byte{0xff}), string(make([]byte, 256))} {
		require.ErrorIs(t, s.Publish(ctx, dest, &broker.Message{}), broker.ErrInvalidArgument, "%q", dest)
		_, err := s.Fetch(ctx, dest, broker.Filter{}, 1)
		require.ErrorIs(t, err, broker.ErrInvalidArgument, "%q", dest)
	}
	require.ErrorIs(t, s.Publish(ctx, "d", nil), broker.ErrInvalidArgument)
	require.ErrorIs(t, s.Ack(ctx, nil), broker.ErrInvalidArgument)
	require.ErrorIs(t, s.Release(ctx, &broker.Record{Destination: "d"}), broker.ErrInvalidArgument, "a record without an id")
	require.ErrorIs(t, s.Renew(ctx, &broker.Record{Destination: "d"}), broker.ErrInvalidArgument, "a record without an id")
	require.ErrorIs(t, s.Renew(ctx, nil), broker.ErrInvalidArgument)
	err := s.Publish(ctx, "d", &broker.Message{Body: []byte("12345")})
	require.ErrorIs(t, err, classify.ErrTooLarge)
	require.Equal(t, 4, s.MaxMessageBytes("d"))
	require.NoError(t, s.Publish(ctx, "d", &broker.Message{Body: []byte("1234")}))
	recs, err := s.Fetch(ctx, "d", broker.Filter{}, 0)
	require.NoError(t, err)
	require.Empty(t, recs, "max 0 fetches nothing")
	_, err = s.Fetch(ctx, "d", broker.Filter{Classes: []classify.Class{"bogus"}}, 1)
	require.ErrorIs(t, err, broker.ErrInvalidArgument, "an invalid filter is refused")
	_, err = s.List(ctx, broker.ListOptions{})
	require.ErrorIs(t, err, errors.ErrUnsupported, "a driver without a Lister")
	_, err = s.Purge(ctx, broker.PurgeRequest{Filter: broker.Filter{Until: time.Now()}})
	require.ErrorIs(t, err, errors.ErrUnsupported)
	require.False(t, s.As(new(int)))
}

func TestStoreFiltersWhatTheDriverDoesNot(t *testing.T) {
	src := memory.New(nil)
	bodies := map[string][]byte{}
	for i, c := range []classify.Class{classify.ClassTransient, classify.ClassInvalidGeometry, classify.ClassTransient, classify.ClassCRSMismatch, classify.ClassInvalidGeometry} {
		m := envelopeMessage(t, c, "evt-"+strconv.Itoa(i))
		bodies[string(m.Body)] = m.Body
		require.NoError(t, src.Publish(context.Background(), "d", m))
	}
	s, d := newSlow(0, nil)
	for _, m := range memory.Messages(src, "d") {
		require.NoError(t, s.Publish(context.Background(), "d", m))
	}
	f := broker.Filter{Classes: []classify.Class{classify.ClassInvalidGeometry}}
	recs, err := s.Fetch(context.Background(), "d", f, 1)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	env, err := broker.EnvelopeOf(recs[0].Message)
	require.NoError(t, err)
	require.Equal(t, classify.ClassInvalidGeometry, env.FailureClass)
	require.Equal(t, []string{"0"}, d.released, "the record outside the filter was released")
	recs2, err := s.Fetch(context.Background(), "d", f, 10)
	require.NoError(t, err)
	require.Len(t, recs2, 1, "the other matching record, found past the released ones")
}

func TestStoreClosed(t *testing.T) {
	s, d := newSlow(0, nil)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close())
	require.Equal(t, int32(1), d.closed.Load(), "the driver is closed once")
	ctx := context.Background()
	require.ErrorIs(t, s.Publish(ctx, "d", &broker.Message{}), broker.ErrClosed)
	_, err := s.Fetch(ctx, "d", broker.Filter{}, 1)
	require.ErrorIs(t, err, broker.ErrClosed)
	require.ErrorIs(t, s.Ack(ctx, &broker.Record{ID: "1", Destination: "d"}), broker.ErrClosed)
	require.ErrorIs(t, s.Renew(ctx, &broker.Record{ID: "1", Destination: "d"}), broker.ErrClosed)
	_, err = s.List(ctx, broker.ListOptions{})
	require.ErrorIs(t, err, broker.ErrClosed)
}

func TestFilterValidate(t *testing.T) {
	many := make([]string, broker.MaxFilterValues+1)
	nan := 0.0
	nan /= nan
	for name, f := range map[string]broker.Filter{
		"class":     {Classes: []classify.Class{"nope"}},
		"stage":     {Stages: []classify.Stage{"nope"}},
		"kind":      {ReasonKinds: []classify.ReasonKind{"nope"}},
		"epsg":      {EPSG: []int{-1}},
		"window":    {Since: time.Unix(10, 0), Until: time.Unix(5, 0)},
		"too many":  {IDs: many},
		"bbox NaN":  {BBox: bound(nan, 0, 1, 1)},
		"bbox flip": {BBox: bound(1, 1, 0, 0)},
	} {
		require.ErrorIs(t, f.Validate(), broker.ErrInvalidArgument, name)
	}
	require.NoError(t, broker.Filter{Classes: classify.Classes(), ReasonKinds: classify.ReasonKinds(), BBox: bound(-1, -1, 1, 1)}.Validate())
}

// gotOpts is what the test scheme's opener was last given.
var (
	gotOpts    broker.OpenOptions
	registerMu sync.Once
)

func TestOpenStore(t *testing.T) {
	registerMu.Do(func() {
		broker.RegisterStore("geodlqtest", func(_ context.Context, u *url.URL, raw string, o broker.OpenOptions) (*broker.Store, error) {
			gotOpts = o
			if u.Host == "missing" {
				return nil, broker.ErrNoStore
			}
			return memory.New(nil), nil
		})
	})
	require.Contains(t, broker.StoreSchemes(), "geodlqtest")
	require.Panics(t, func() { broker.RegisterStore("geodlqtest", nil) })
	require.Panics(t, func() {
		broker.RegisterStore("Bad Scheme", func(context.Context, *url.URL, string, broker.OpenOptions) (*broker.Store, error) { return nil, nil })
	})
	s, err := broker.OpenStore(context.Background(), "geodlqtest://here", &broker.OpenOptions{ReadOnly: true})
	require.NoError(t, err)
	require.NotNil(t, s)
	require.True(t, gotOpts.ReadOnly)
	require.True(t, s.ReadOnly(), "OpenStore makes the store refuse writes whatever the opener did")
	require.Equal(t, 10*time.Second, gotOpts.ConnectTimeout, "the default connect timeout")
	_, err = broker.OpenStore(context.Background(), "geodlqtest://missing", nil)
	require.ErrorIs(t, err, broker.ErrNoStore)
	_, err = broker.OpenStore(context.Background(), "geodlqtst://x", nil)
	require.ErrorIs(t, err, broker.ErrUnknownScheme)
	require.ErrorContains(t, err, `did you mean "geodlqtest"?`)
	_, err = broker.OpenStore(context.Background(), "just-a-path.db", nil)
	require.ErrorIs(t, err, broker.ErrUnknownScheme)
	_, err = broker.OpenStore(context.Background(), "zzzzzzzzzz://x", nil)
	require.NotContains(t, err.Error(), "did you mean", "no suggestion when nothing is close")
	require.Equal(t, "postgres://u:xxxxx@h/db", broker.Redact("postgres://u:secret@h/db"))
}

func TestStoreReadOnly(t *testing.T) {
	s, d := newSlow(0, &broker.StoreOptions{ReadOnly: true})
	ctx := context.Background()
	require.True(t, s.ReadOnly())
	require.ErrorIs(t, s.Publish(ctx, "d", &broker.Message{}), broker.ErrReadOnly)
	_, err := s.Fetch(ctx, "d", broker.Filter{}, 1)
	require.ErrorIs(t, err, broker.ErrReadOnly, "a lease is a write")
	r := &broker.Record{ID: "1", Destination: "d"}
	require.ErrorIs(t, s.Ack(ctx, r), broker.ErrReadOnly)
	require.ErrorIs(t, s.Release(ctx, r), broker.ErrReadOnly)
	require.ErrorIs(t, s.Renew(ctx, r), broker.ErrReadOnly)
	require.Empty(t, d.stored)
}

func TestBucketOf(t *testing.T) {
	week := 7 * 24 * time.Hour
	for _, tc := range []struct {
		t    time.Time
		d    time.Duration
		want time.Time
	}{
		// The Unix epoch was a Thursday: weeks start on Thursdays.
		{time.Date(2026, 12, 3, 7, 0, 0, 0, time.UTC), week, time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)},
		{time.Date(2026, 12, 2, 23, 59, 59, 0, time.UTC), week, time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)},
		{time.Date(2026, 12, 3, 7, 45, 0, 0, time.FixedZone("x", 3600)), time.Hour, time.Date(2026, 12, 3, 6, 0, 0, 0, time.UTC)},
		{time.Date(1969, 12, 31, 23, 30, 0, 0, time.UTC), time.Hour, time.Date(1969, 12, 31, 23, 0, 0, 0, time.UTC)},
		{time.Unix(10, 700_000_000), 500 * time.Millisecond, time.Unix(10, 500_000_000).UTC()},
		{time.Unix(10, 0), 0, time.Time{}},
	} {
		require.Equal(t, tc.want, broker.BucketOf(tc.t, tc.d), "%v / %v", tc.t, tc.d)
	}
}
