package sqs

import (
	"context"
	"slices"
	"sync"
	"time"
)

// batchTimeout bounds one batched request (SendMessageBatch,
// DeleteMessageBatch, ChangeMessageVisibilityBatch). The request is shared
// by several callers, so it does not run under any one caller's context.
const batchTimeout = 30 * time.Second

// maxBatchEntries is SQS's limit on entries per batch request.
const maxBatchEntries = 10

// maxBatchBytes is SQS's limit on the payload of one SendMessageBatch
// request (bodies and attributes of all entries).
const maxBatchBytes = 1 << 20

type entry[T any] struct {
	ctx  context.Context
	item T
	size int
	done chan struct{}
	err  error
}

// batcher coalesces concurrent calls into batch requests without adding
// latency: a call goes out at once when fewer than maxInflight requests
// are running; otherwise it waits and leaves with the next request, along
// with every call that queued meanwhile (up to maxItems entries and
// maxBytes bytes).
type batcher[T any] struct {
	maxItems, maxBytes, maxInflight int
	// send performs one request and sets each entry's err.
	send func(ctx context.Context, batch []*entry[T])

	mu       sync.Mutex
	pending  []*entry[T]
	inflight int
}

// do submits item and waits for its outcome. If ctx ends while the item is
// still queued, it is withdrawn; if it ends after the item left, do
// returns ctx.Err() at once and the request completes on its own (the item
// may have taken effect).
func (b *batcher[T]) do(ctx context.Context, item T, size int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	e := &entry[T]{ctx: ctx, item: item, size: size, done: make(chan struct{})}
	b.mu.Lock()
	b.pending = append(b.pending, e)
	b.kick()
	b.mu.Unlock()
	select {
	case <-e.done:
		return e.err
	case <-ctx.Done():
		b.mu.Lock()
		if i := slices.Index(b.pending, e); i >= 0 {
			b.pending = slices.Delete(b.pending, i, i+1)
		}
		b.mu.Unlock()
		return ctx.Err()
	}
}

// kick starts requests while there is room. b.mu must be held.
func (b *batcher[T]) kick() {
	for b.inflight < b.maxInflight && len(b.pending) > 0 {
		n, bytes := 0, 0
		for n < len(b.pending) && n < b.maxItems {
			if n > 0 && bytes+b.pending[n].size > b.maxBytes {
				break
			}
			bytes += b.pending[n].size
			n++
		}
		batch := slices.Clone(b.pending[:n])
		b.pending = slices.Delete(b.pending, 0, n)
		b.inflight++
		go b.run(batch)
	}
}

func (b *batcher[T]) run(batch []*entry[T]) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(batch[0].ctx), batchTimeout)
	b.send(ctx, batch)
	cancel()
	for _, e := range batch {
		close(e.done)
	}
	b.mu.Lock()
	b.inflight--
	b.kick()
	b.mu.Unlock()
}
