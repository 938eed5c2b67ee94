package sqslambda_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/sqs/sqslambda"
	"github.com/geodlq/geodlq/classify"
)

// stallingDriver is a dead-letter store that takes the first ok writes and
// then stalls: every later Publish waits for its context to end and stores
// nothing, as a database that stopped answering would.
type stallingDriver struct {
	mu      sync.Mutex
	ok      int
	stored  map[string]bool // message ids of the stored envelopes
	ignores bool            // stall even past the context (a driver that ignores it)
	release chan struct{}   // ends an ignoring stall (after the deadline)
}

func (d *stallingDriver) Publish(ctx context.Context, _ string, m *broker.Message) error {
	d.mu.Lock()
	if d.ok > 0 {
		d.ok--
		d.stored[m.Envelope.Source.MessageID] = true
		d.mu.Unlock()
		return nil
	}
	d.mu.Unlock()
	if d.ignores {
		<-d.release
		return errors.New("released")
	}
	<-ctx.Done()
	return ctx.Err()
}

func (d *stallingDriver) Fetch(context.Context, string, broker.Filter, int) ([]*broker.Record, error) {
	return nil, nil
}
func (d *stallingDriver) Ack(context.Context, *broker.Record) error     { return nil }
func (d *stallingDriver) Release(context.Context, *broker.Record) error { return nil }
func (d *stallingDriver) Renew(context.Context, *broker.Record) error   { return nil }
func (d *stallingDriver) Close() error                                  { return nil }

// publisherFunc adapts a function to broker.Publisher.
type publisherFunc func(ctx context.Context, dest string, m *broker.Message) error

func (f publisherFunc) Publish(ctx context.Context, dest string, m *broker.Message) error {
	return f(ctx, dest, m)
}

// TestHandleSQSReturnsBeforeTheDeadline gives HandleSQS deadlines of 1, 3,
// 5 and 9 seconds — Lambda's default timeout is 3 — and a dead-letter
// store that stalls after a few writes, with its default 2s CancelGrace
// (and, the second time, a store that ignores its context altogether). It
// must return before the deadline every time, and account for every
// record exactly once: processed (not reported), dead-lettered (stored,
// not reported), or reported in batchItemFailures — never both stored and
// reported, never neither.
func TestHandleSQSReturnsBeforeTheDeadline(t *testing.T) {
	for _, ignores := range []bool{false, true} {
		for _, secs := range []int{1, 3, 5, 9} {
			t.Run(fmt.Sprintf("%ds ignores=%v", secs, ignores), func(t *testing.T) {
				t.Parallel()
				drv := &stallingDriver{ok: 3, stored: map[string]bool{}, ignores: ignores, release: make(chan struct{})}
				var pub broker.Publisher = broker.NewStore("stalling", drv, nil) // CancelGrace 2s
				if ignores {
					// Not a broker.Store: nothing bounds its writes.
					pub = publisherFunc(func(ctx context.Context, dest string, m *broker.Message) error { return drv.Publish(ctx, dest, m) })
				}
				var mu sync.Mutex
				processed := map[string]bool{}
				h, err := sqslambda.New(func(ctx context.Context, m *broker.Message) error {
					body := string(m.Body)
					if strings.HasPrefix(body, "bowtie") {
						return classify.InvalidGeometry(errors.New("Self-intersection[0.5 0.5]"))
					}
					if strings.HasPrefix(body, "slow") {
						select {
						case <-ctx.Done():
							return ctx.Err()
						case <-time.After(time.Duration(secs) * 150 * time.Millisecond):
						}
					}
					mu.Lock()
					processed[m.Source.MessageID] = true
					mu.Unlock()
					return nil
				}, &sqslambda.Options{Processor: broker.ProcessorOptions{Publisher: pub}, Consumer: broker.ConsumerOptions{Concurrency: 4}})
				require.NoError(t, err)

				var batch []events.SQSMessage
				for i := range 40 {
					kind := [...]string{"parcel", "bowtie", "slow", "bowtie"}[i%4]
					batch = append(batch, events.SQSMessage{MessageId: fmt.Sprintf("m-%02d", i), Body: fmt.Sprintf("%s-%d", kind, i),
						EventSourceARN: "arn:aws:sqs:us-east-1:123456789012:vector-jobs", Attributes: map[string]string{"ApproximateReceiveCount": "1"}})
				}
				start := time.Now()
				deadline := start.Add(time.Duration(secs) * time.Second)
				ctx, cancel := context.WithDeadline(context.Background(), deadline)
				defer cancel()
				// A store that ignores its context answers, at last, a
				// second after the deadline (storing nothing).
				time.AfterFunc(time.Until(deadline)+time.Second, func() { close(drv.release) })
				resp, err := h.HandleSQS(ctx, events.SQSEvent{Records: batch})
				returned := time.Now()
				require.NoError(t, err)
				require.True(t, returned.Before(deadline), "returned %v after the start, deadline %ds", returned.Sub(start), secs)

				failed := map[string]bool{}
				for _, f := range resp.BatchItemFailures {
					failed[f.ItemIdentifier] = true
				}
				mu.Lock()
				defer mu.Unlock()
				drv.mu.Lock()
				defer drv.mu.Unlock()
				for _, r := range batch {
					id := r.MessageId
					stored := drv.stored[id]
					switch {
					case stored:
						require.False(t, failed[id], "%s: dead-lettered and reported failed", id)
					case processed[id]:
						require.False(t, failed[id], "%s: processed yet reported", id)
					default:
						require.True(t, failed[id], "%s: neither done nor reported: lost", id)
					}
				}
				require.Len(t, drv.stored, 3, "the writes before the stall")
				require.NotEmpty(t, failed, "the stalled writes are reported")
			})
		}
	}
}
