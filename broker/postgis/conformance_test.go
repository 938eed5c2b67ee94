package postgis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/broker/postgis"
	"github.com/geodlq/geodlq/broker/postgis/internal/pgtest"
	"github.com/geodlq/geodlq/classify"
)

// harness gives each conformance test its own schema; every handle is a
// store on a pool of its own, as another process would have.
type harness struct {
	t    *testing.T
	opts postgis.Options
}

func (h *harness) MakeStore(ctx context.Context) (*broker.Store, error) { return h.Reopen(ctx) }

func (h *harness) Reopen(ctx context.Context) (*broker.Store, error) {
	return postgis.New(ctx, pgtest.NewPool(h.t, 4), &h.opts)
}

func (h *harness) Capabilities() brokertest.Capabilities {
	return brokertest.Capabilities{LeaseExpiry: h.opts.LeaseTTL, MaxMessageBytes: h.opts.MaxMessageBytes}
}

func (h *harness) Close() {}

func TestConformance(t *testing.T) {
	brokertest.RunConformanceTests(t, func(ctx context.Context, t *testing.T) (brokertest.Harness, error) {
		opts := postgis.Options{Schema: pgtest.Schema(t), StoreOptions: broker.StoreOptions{LeaseTTL: 2 * time.Second, MaxMessageBytes: 256 << 10}}
		m := opts
		m.Create = true
		if _, err := postgis.New(ctx, pgtest.NewPool(t, 1), &m); err != nil {
			return nil, err
		}
		return &harness{t: t, opts: opts}, nil
	})
}

func TestConsumerConformance(t *testing.T) {
	brokertest.RunConsumerTests(t, func(ctx context.Context, t *testing.T) (brokertest.ConsumerHarness, error) {
		s, err := postgis.New(ctx, pgtest.NewPool(t, 8), &postgis.Options{Schema: pgtest.Schema(t), Create: true,
			StoreOptions: broker.StoreOptions{LeaseTTL: time.Second}})
		if err != nil {
			return nil, err
		}
		return brokertest.StoreConsumerHarness(s, "source", time.Second, func(s *broker.Store, d string, proc *broker.Processor) (*broker.Consumer, error) {
			return postgis.NewConsumer(s, d, proc, &postgis.ConsumerOptions{PollInterval: 20 * time.Millisecond,
				ConsumerOptions: broker.ConsumerOptions{Concurrency: 4}})
		}), nil
	})
}

// TestNewConsumer: the consumer takes only the records its filter
// selects, and refuses bad arguments.
func TestNewConsumer(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, &postgis.Options{StoreOptions: broker.StoreOptions{LeaseTTL: time.Second}})
	proc, err := broker.NewProcessor(&broker.ProcessorOptions{Publisher: memory.New(nil)})
	require.NoError(t, err)
	_, err = postgis.NewConsumer(nil, "d", proc, nil)
	require.ErrorIs(t, err, broker.ErrInvalidArgument)
	_, err = postgis.NewConsumer(s, "", proc, nil)
	require.ErrorIs(t, err, broker.ErrInvalidArgument)
	_, err = postgis.NewConsumer(s, "d", nil, nil)
	require.ErrorIs(t, err, broker.ErrInvalidArgument)
	_, err = postgis.NewConsumer(s, "d", proc, &postgis.ConsumerOptions{Filter: broker.Filter{EPSG: []int{-1}}})
	require.ErrorIs(t, err, broker.ErrInvalidArgument)

	const d = "inbox"
	keep := bowtie(t, "idem:consumer:keep")
	other := message(t, `{"event_id":"evt-other","geometry":{"type":"Point","coordinates":[1,2]}}`, "idem:consumer:other",
		classify.SchemaViolation(errors.New("x")), time.Time{})
	publishAll(t, s, d, []*broker.Message{keep, other})
	c, err := postgis.NewConsumer(s, d, proc, &postgis.ConsumerOptions{PollInterval: 10 * time.Millisecond,
		Filter: broker.Filter{Classes: []classify.Class{classify.ClassInvalidGeometry}}})
	require.NoError(t, err)
	got := make(chan []byte, 10)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- c.Run(rctx, func(_ context.Context, m *broker.Message) error { got <- m.Body; return nil })
	}()
	select {
	case b := <-got:
		require.Equal(t, keep.Body, b)
	case <-time.After(10 * time.Second):
		t.Fatal("nothing consumed")
	}
	require.Eventually(t, func() bool { return count(t, s, "status = 'replayed'") == 1 }, 10*time.Second, 20*time.Millisecond)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.Empty(t, got, "the record outside the filter was not consumed")
	require.Equal(t, 1, count(t, s, "status = 'pending' AND event_id = 'evt-other'"))
}
