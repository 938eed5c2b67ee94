package broker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
)

// hangingDriver's writes wait for their context and count the calls.
type hangingDriver struct{ calls atomic.Int32 }

func (d *hangingDriver) Publish(ctx context.Context, _ string, _ *broker.Message) error {
	d.calls.Add(1)
	<-ctx.Done()
	return ctx.Err()
}
func (d *hangingDriver) Fetch(context.Context, string, broker.Filter, int) ([]*broker.Record, error) {
	return nil, nil
}
func (d *hangingDriver) Ack(ctx context.Context, _ *broker.Record) error {
	d.calls.Add(1)
	<-ctx.Done()
	return ctx.Err()
}
func (d *hangingDriver) Release(context.Context, *broker.Record) error { return nil }
func (d *hangingDriver) Renew(context.Context, *broker.Record) error   { return nil }
func (d *hangingDriver) Close() error                                  { return nil }

// TestWriteDeadline: a write under WithWriteDeadline ends by it, within
// CancelGrace or not, with its outcome unknown; one that cannot start
// before it is refused without reaching the driver; the earlier of two
// deadlines holds.
func TestWriteDeadline(t *testing.T) {
	d := &hangingDriver{}
	s := broker.NewStore("hanging", d, &broker.StoreOptions{CancelGrace: 5 * time.Second})
	require.Equal(t, 5*time.Second, s.CancelGrace())
	m := &broker.Message{Body: []byte("x")}

	for _, op := range []string{"publish", "ack"} {
		t.Run(op, func(t *testing.T) {
			write := func(ctx context.Context) error {
				if op == "ack" {
					return s.Ack(ctx, &broker.Record{ID: "1", Destination: "d", Lease: "l", Message: m})
				}
				return s.Publish(ctx, "d", m)
			}
			// Cancelled at 50ms: the 5s grace is cut at the 300ms deadline.
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			start := time.Now()
			err := write(broker.WithWriteDeadline(ctx, start.Add(300*time.Millisecond)))
			took := time.Since(start)
			require.ErrorIs(t, err, broker.ErrOutcomeUnknown)
			require.GreaterOrEqual(t, took, 300*time.Millisecond)
			require.Less(t, took, 2*time.Second, "the grace is not given past the write deadline")

			// Not cancelled at all: the deadline alone ends it.
			start = time.Now()
			err = write(broker.WithWriteDeadline(context.Background(), start.Add(100*time.Millisecond)))
			require.ErrorIs(t, err, broker.ErrOutcomeUnknown)
			require.Less(t, time.Since(start), 2*time.Second)

			// Past the deadline: refused, the driver never called.
			before := d.calls.Load()
			err = write(broker.WithWriteDeadline(context.Background(), time.Now().Add(-time.Millisecond)))
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.False(t, errors.Is(err, broker.ErrOutcomeUnknown))
			require.Equal(t, before, d.calls.Load())
		})
	}

	early := time.Now().Add(time.Second)
	ctx := broker.WithWriteDeadline(broker.WithWriteDeadline(context.Background(), early), early.Add(time.Hour))
	got, ok := broker.WriteDeadline(ctx)
	require.True(t, ok)
	require.Equal(t, early, got, "the earlier deadline holds")
	ctx = broker.WithWriteDeadline(broker.WithWriteDeadline(context.Background(), early.Add(time.Hour)), early)
	got, _ = broker.WriteDeadline(ctx)
	require.Equal(t, early, got)
	_, ok = broker.WriteDeadline(context.Background())
	require.False(t, ok)
}
