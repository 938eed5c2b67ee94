package servicebus_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/geodlq/geodlq/broker/servicebus"
)

// fakeNamespace is an in-memory Service Bus namespace behind the SDK's
// Sender and Receiver boundary, faithful to the semantics the adapter
// relies on:
//
//   - queues are FIFO by sequence number; each has a $DeadLetterQueue;
//   - PeekLock: a received message is locked for the queue's LockDuration
//     under a fresh lock token and its DeliveryCount grows by one;
//   - CompleteMessage, AbandonMessage, DeadLetterMessage and
//     RenewMessageLock fail with azservicebus.CodeLockLost when the token is
//     not the message's current one or its lock expired;
//   - a message whose lock expires or that is abandoned after
//     MaxDeliveryCount deliveries moves to $DeadLetterQueue with
//     DeadLetterReason "MaxDeliveryCountExceeded";
//   - DeadLetterMessage moves it there with the given reason, description
//     and properties merged in, the body unchanged;
//   - ReceiveMessages blocks until a message is available or ctx ends
//     (returning ctx's error), like the SDK;
//   - a message over MaxMessageBytes (body plus properties) is refused.
type fakeNamespace struct {
	mu     sync.Mutex
	queues map[string]*fakeQueue
	seq    int64
	cfg    fakeConfig
	sends  int
}

type fakeConfig struct {
	lock             time.Duration
	maxDeliveryCount uint32
	maxMessageBytes  int
}

type fakeQueue struct{ main, dead []*fakeMsg }

type fakeMsg struct {
	body          []byte
	props         map[string]any
	id            string
	seq           int64
	enqueued      time.Time
	deliveries    uint32
	token         [16]byte
	lockedUntil   time.Time
	reason, desc  *string
	deadLetterSrc *string
}

func newNamespace(cfg fakeConfig) *fakeNamespace {
	if cfg.lock == 0 {
		cfg.lock = time.Minute
	}
	if cfg.maxDeliveryCount == 0 {
		cfg.maxDeliveryCount = 10
	}
	if cfg.maxMessageBytes == 0 {
		cfg.maxMessageBytes = 256 << 10
	}
	return &fakeNamespace{queues: map[string]*fakeQueue{}, cfg: cfg}
}

func (ns *fakeNamespace) queue(name string) *fakeQueue {
	q, ok := ns.queues[name]
	if !ok {
		q = &fakeQueue{}
		ns.queues[name] = q
	}
	return q
}

var errClosed = &azservicebus.Error{Code: azservicebus.CodeClosed}

func lockLost() error { return &azservicebus.Error{Code: azservicebus.CodeLockLost} }

// maintain expires locks and applies MaxDeliveryCount. ns.mu held.
func (ns *fakeNamespace) maintain(q *fakeQueue, name string, now time.Time) {
	kept := q.main[:0]
	for _, m := range q.main {
		if !m.lockedUntil.IsZero() && now.After(m.lockedUntil) {
			m.lockedUntil = time.Time{}
			if m.deliveries >= ns.cfg.maxDeliveryCount {
				r, d := "MaxDeliveryCountExceeded", fmt.Sprintf("Message could not be consumed after %d delivery attempts.", ns.cfg.maxDeliveryCount)
				m.reason, m.desc, m.deadLetterSrc = &r, &d, &name
				q.dead = append(q.dead, m)
				continue
			}
		}
		kept = append(kept, m)
	}
	q.main = kept
	for _, m := range q.dead {
		if !m.lockedUntil.IsZero() && now.After(m.lockedUntil) {
			m.lockedUntil = time.Time{}
		}
	}
}

// connector implements servicebus.Connector: every call opens new links.
func (ns *fakeNamespace) connector() servicebus.Connector { return fakeConnector{ns} }

type fakeConnector struct{ ns *fakeNamespace }

func (c fakeConnector) Sender(queue string) (servicebus.Sender, error) {
	return &fakeSender{ns: c.ns, queue: queue}, nil
}

func (c fakeConnector) Receiver(queue string, deadLetter bool) (servicebus.Receiver, error) {
	return &fakeReceiver{ns: c.ns, queue: queue, dead: deadLetter}, nil
}

type fakeSender struct {
	ns     *fakeNamespace
	queue  string
	closed bool
}

func (s *fakeSender) SendMessage(ctx context.Context, m *azservicebus.Message, _ *azservicebus.SendMessageOptions) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.ns.mu.Lock()
	defer s.ns.mu.Unlock()
	if s.closed {
		return errClosed
	}
	size := len(m.Body)
	for k, v := range m.ApplicationProperties {
		size += len(k) + len(fmt.Sprint(v))
	}
	if size > s.ns.cfg.maxMessageBytes {
		return fmt.Errorf("amqp: link detached: com.microsoft:message-too-large: message of %d bytes exceeds %d", size, s.ns.cfg.maxMessageBytes)
	}
	s.ns.seq++
	s.ns.sends++
	fm := &fakeMsg{body: append([]byte(nil), m.Body...), props: maps.Clone(m.ApplicationProperties), seq: s.ns.seq, enqueued: time.Now()}
	if m.MessageID != nil {
		fm.id = *m.MessageID
	} else {
		fm.id = fmt.Sprintf("msg-%d", fm.seq)
	}
	q := s.ns.queue(s.queue)
	q.main = append(q.main, fm)
	return nil
}

func (s *fakeSender) Close(context.Context) error {
	s.ns.mu.Lock()
	s.closed = true
	s.ns.mu.Unlock()
	return nil
}

type fakeReceiver struct {
	ns     *fakeNamespace
	queue  string
	dead   bool
	closed bool
}

func (r *fakeReceiver) list(q *fakeQueue) []*fakeMsg {
	if r.dead {
		return q.dead
	}
	return q.main
}

func (r *fakeReceiver) ReceiveMessages(ctx context.Context, max int, _ *azservicebus.ReceiveMessagesOptions) ([]*azservicebus.ReceivedMessage, error) {
	if max <= 0 {
		return nil, errors.New("maxMessages should be greater than 0")
	}
	for {
		r.ns.mu.Lock()
		if r.closed {
			r.ns.mu.Unlock()
			return nil, errClosed
		}
		now := time.Now()
		q := r.ns.queue(r.queue)
		r.ns.maintain(q, r.queue, now)
		var out []*azservicebus.ReceivedMessage
		for _, m := range r.list(q) {
			if len(out) == max {
				break
			}
			if !m.lockedUntil.IsZero() {
				continue
			}
			m.deliveries++
			_, _ = rand.Read(m.token[:])
			m.lockedUntil = now.Add(r.ns.cfg.lock)
			out = append(out, m.received())
		}
		r.ns.mu.Unlock()
		if len(out) > 0 {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

func (m *fakeMsg) received() *azservicebus.ReceivedMessage {
	seq, enq, until := m.seq, m.enqueued, m.lockedUntil
	return &azservicebus.ReceivedMessage{
		Body: append([]byte(nil), m.body...), ApplicationProperties: maps.Clone(m.props), MessageID: m.id,
		SequenceNumber: &seq, EnqueuedTime: &enq, DeliveryCount: m.deliveries, LockToken: m.token, LockedUntil: &until,
		DeadLetterReason: m.reason, DeadLetterErrorDescription: m.desc, DeadLetterSource: m.deadLetterSrc,
	}
}

// locked finds the message msg's token locks, or fails with CodeLockLost.
// ns.mu held.
func (r *fakeReceiver) locked(msg *azservicebus.ReceivedMessage) (*fakeQueue, int, error) {
	if r.closed {
		return nil, 0, errClosed
	}
	q := r.ns.queue(r.queue)
	r.ns.maintain(q, r.queue, time.Now())
	for i, m := range r.list(q) {
		if m.token == msg.LockToken && !m.lockedUntil.IsZero() {
			return q, i, nil
		}
	}
	return nil, 0, lockLost()
}

func (r *fakeReceiver) remove(q *fakeQueue, i int) *fakeMsg {
	if r.dead {
		m := q.dead[i]
		q.dead = append(q.dead[:i:i], q.dead[i+1:]...)
		return m
	}
	m := q.main[i]
	q.main = append(q.main[:i:i], q.main[i+1:]...)
	return m
}

func (r *fakeReceiver) CompleteMessage(ctx context.Context, msg *azservicebus.ReceivedMessage, _ *azservicebus.CompleteMessageOptions) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r.ns.mu.Lock()
	defer r.ns.mu.Unlock()
	q, i, err := r.locked(msg)
	if err != nil {
		return err
	}
	r.remove(q, i)
	return nil
}

func (r *fakeReceiver) AbandonMessage(ctx context.Context, msg *azservicebus.ReceivedMessage, _ *azservicebus.AbandonMessageOptions) error {
	r.ns.mu.Lock()
	defer r.ns.mu.Unlock()
	q, i, err := r.locked(msg)
	if err != nil {
		return err
	}
	m := r.list(q)[i]
	m.lockedUntil = time.Time{}
	if !r.dead && m.deliveries >= r.ns.cfg.maxDeliveryCount {
		r.remove(q, i)
		reason, desc, src := "MaxDeliveryCountExceeded", fmt.Sprintf("Message could not be consumed after %d delivery attempts.", r.ns.cfg.maxDeliveryCount), r.queue
		m.reason, m.desc, m.deadLetterSrc = &reason, &desc, &src
		q.dead = append(q.dead, m)
	}
	return nil
}

func (r *fakeReceiver) DeadLetterMessage(ctx context.Context, msg *azservicebus.ReceivedMessage, o *azservicebus.DeadLetterOptions) error {
	r.ns.mu.Lock()
	defer r.ns.mu.Unlock()
	if r.dead {
		return errors.New("cannot dead-letter a message of a dead-letter queue")
	}
	q, i, err := r.locked(msg)
	if err != nil {
		return err
	}
	m := r.remove(q, i)
	m.lockedUntil = time.Time{}
	if o != nil {
		m.reason, m.desc = o.Reason, o.ErrorDescription
		if m.props == nil {
			m.props = map[string]any{}
		}
		maps.Copy(m.props, o.PropertiesToModify)
	}
	q.dead = append(q.dead, m)
	return nil
}

func (r *fakeReceiver) RenewMessageLock(ctx context.Context, msg *azservicebus.ReceivedMessage, _ *azservicebus.RenewMessageLockOptions) error {
	r.ns.mu.Lock()
	defer r.ns.mu.Unlock()
	q, i, err := r.locked(msg)
	if err != nil {
		return err
	}
	m := r.list(q)[i]
	m.lockedUntil = time.Now().Add(r.ns.cfg.lock)
	until := m.lockedUntil
	msg.LockedUntil = &until
	return nil
}

func (r *fakeReceiver) Close(context.Context) error {
	r.ns.mu.Lock()
	r.closed = true
	r.ns.mu.Unlock()
	return nil
}

// counts returns the number of messages in a queue and its dead-letter
// queue.
func (ns *fakeNamespace) counts(queue string) (active, dead int) {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	q := ns.queue(queue)
	ns.maintain(q, queue, time.Now())
	return len(q.main), len(q.dead)
}

var (
	_ servicebus.Sender   = (*fakeSender)(nil)
	_ servicebus.Receiver = (*fakeReceiver)(nil)
)
