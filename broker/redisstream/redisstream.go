package redisstream

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
)

// Defaults.
const (
	// DefaultPrefix starts every stream key when [Options.Prefix] is empty.
	DefaultPrefix = "geodlq"
	// DefaultGroup is the consumer group when [Options.Group] is empty.
	DefaultGroup = "geodlq-replay"
	// DefaultMaxMessageBytes is the body size limit when
	// [Options.MaxMessageBytes] is 0: 64 MiB, far below Redis's 512 MB
	// bulk-string ceiling, which no replayer could usefully hold in memory.
	DefaultMaxMessageBytes = 64 << 20
	// DefaultLeaseTTL is the lease when [Options.LeaseTTL] is 0.
	DefaultLeaseTTL = 30 * time.Second
	// ParkConsumer is the consumer name that holds released entries and
	// entries a filtered Fetch passed over. It is reserved: no Store may use
	// it as its own consumer.
	ParkConsumer = "geodlq:parked"
)

// scanBudget bounds the entries one script call examines, so a filtered
// Fetch over a long stream never blocks Redis for long; Fetch calls the
// script again until it has max records or the stream is exhausted.
const scanBudget = 1000

// Errors.
var (
	// ErrStoreFull is wrapped by the error Publish returns when a
	// destination holds [Options.MaxEntries] entries: the write is refused,
	// nothing is dropped to make room.
	ErrStoreFull = errors.New("redisstream: dead-letter stream full")
	// ErrDurabilityUnconfirmed is wrapped by the error Publish returns when
	// the entry was written but WAIT or WAITAOF did not confirm it within
	// [Options.WaitTimeout]. The entry stays in the stream (and will be
	// replayed); the caller must not acknowledge the source message, whose
	// redelivery then writes a duplicate that replay's idempotency claims
	// absorb.
	ErrDurabilityUnconfirmed = errors.New("redisstream: write not confirmed by WAIT/WAITAOF")
)

// StoreFullError reports a write refused by [Options.MaxEntries]. It
// unwraps to [ErrStoreFull].
type StoreFullError struct {
	Destination string
	// Entries is the stream's length when the write was refused.
	Entries int64
	// Limit is [Options.MaxEntries].
	Limit int64
}

func (e *StoreFullError) Error() string {
	return fmt.Sprintf("redisstream: destination %q holds %d entries, at its limit of %d: write refused (nothing is trimmed; replay or remove entries to make room)",
		e.Destination, e.Entries, e.Limit)
}

// Unwrap returns [ErrStoreFull].
func (e *StoreFullError) Unwrap() error { return ErrStoreFull }

// Options configures a [Store]. Nil means defaults.
type Options struct {
	// Prefix starts every stream key: "<Prefix>:<destination>". Default
	// [DefaultPrefix].
	Prefix string
	// Group is the consumer group replay reads through (XREADGROUP GROUP),
	// one per logical replayer; it is created at the stream's first entry
	// ("0") on the first Fetch. Default [DefaultGroup].
	Group string
	// Consumer is this handle's consumer name in Group. It must be unique
	// per handle: a restarted process may reuse its name. Default
	// "<hostname>-<pid>-<random>", new for every Store. [ParkConsumer] is
	// reserved.
	Consumer string
	// LeaseTTL is how long a fetched entry stays with its consumer before
	// another Fetch takes it over: the min-idle-time of XAUTOCLAIM and
	// XCLAIM. Default [DefaultLeaseTTL].
	LeaseTTL time.Duration
	// MaxMessageBytes refuses larger bodies with a [classify.TooLargeError].
	// Default [DefaultMaxMessageBytes]. Redis itself accepts up to its
	// proto-max-bulk-len (512 MB by default).
	MaxMessageBytes int
	// MaxEntries, when positive, caps a destination's stream length
	// (XLEN): Publish refuses a write to a full stream with a
	// [StoreFullError]. Entries are never trimmed (no MAXLEN or MINID).
	// With the default Ack, which deletes replayed entries, XLEN is the
	// number of entries not yet replayed; with KeepAcked it counts
	// replayed ones too. Default 0: no limit.
	MaxEntries int64
	// KeepAcked makes Ack only XACK an entry, leaving it in the stream as
	// a record of what was replayed (trim it yourself). Default false: Ack
	// XACKs and then XDELs the entry, so an acknowledgement is final for
	// every group, not only the one that replayed it.
	KeepAcked bool
	// WaitReplicas, when positive, makes Publish wait until this many
	// replicas acknowledged the write (WAIT numreplicas timeout).
	// Default 0: the primary's acknowledgement suffices.
	WaitReplicas int
	// WaitAOF makes Publish wait until the write is fsynced to the
	// primary's append-only file, and to WaitReplicas replicas' (WAITAOF 1
	// numreplicas timeout). It needs Redis 7.2 or later with appendonly
	// yes; elsewhere every Publish fails. Default false.
	WaitAOF bool
	// WaitTimeout bounds WAIT and WAITAOF. Default 1s.
	WaitTimeout time.Duration
	// Logger receives refused and unconfirmed writes. Nil discards.
	Logger *slog.Logger
}

// Store is a dead-letter store on Redis Streams: a [broker.Publisher], a
// [broker.DeadLetterSource] and a [broker.Limiter]. It is safe for
// concurrent use; every handle on the same Redis, prefix and group shares
// the data, with its own consumer name.
type Store struct {
	client       redis.UniversalClient
	prefix       string
	group        string
	consumer     string
	ttl          time.Duration
	limit        int
	maxEntries   int64
	keepAcked    bool
	waitReplicas int
	waitAOF      bool
	waitTimeout  time.Duration
	log          *slog.Logger

	mu      sync.Mutex
	closed  bool
	streams map[string]struct{} // streams this handle joined as a consumer
}

var (
	_ broker.Publisher        = (*Store)(nil)
	_ broker.DeadLetterSource = (*Store)(nil)
	_ broker.Limiter          = (*Store)(nil)
)

// New returns a store over client (a *redis.Client, *redis.ClusterClient,
// *redis.Ring or any redis.UniversalClient). It does no I/O. The client
// stays the caller's: the store never closes it.
func New(client redis.UniversalClient, opts *Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstream: nil client")
	}
	s := &Store{
		client: client, prefix: DefaultPrefix, group: DefaultGroup,
		ttl: DefaultLeaseTTL, limit: DefaultMaxMessageBytes, waitTimeout: time.Second,
		streams: map[string]struct{}{},
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Prefix != "" {
		s.prefix = o.Prefix
	}
	if o.Group != "" {
		s.group = o.Group
	}
	s.consumer = o.Consumer
	if s.consumer == "" {
		host, _ := os.Hostname()
		s.consumer = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), newToken())
	}
	if s.consumer == ParkConsumer {
		return nil, fmt.Errorf("redisstream: consumer name %q is reserved", ParkConsumer)
	}
	switch {
	case o.LeaseTTL < 0, o.MaxMessageBytes < 0, o.MaxEntries < 0, o.WaitReplicas < 0, o.WaitTimeout < 0:
		return nil, errors.New("redisstream: negative option")
	case o.LeaseTTL > 0 && o.LeaseTTL < time.Millisecond:
		return nil, fmt.Errorf("redisstream: LeaseTTL %v is below Redis's 1ms resolution", o.LeaseTTL)
	}
	if o.LeaseTTL > 0 {
		s.ttl = o.LeaseTTL
	}
	if o.MaxMessageBytes > 0 {
		s.limit = o.MaxMessageBytes
	}
	s.maxEntries = o.MaxEntries
	s.keepAcked = o.KeepAcked
	s.waitReplicas, s.waitAOF = o.WaitReplicas, o.WaitAOF
	if o.WaitTimeout > 0 {
		s.waitTimeout = o.WaitTimeout
	}
	if s.waits() {
		switch client.(type) {
		case *redis.Client, *redis.ClusterClient, *redis.Ring:
		default:
			return nil, fmt.Errorf("redisstream: WaitReplicas and WaitAOF need a *redis.Client, *redis.ClusterClient or *redis.Ring (WAIT must follow the write on its connection), not %T", client)
		}
	}
	s.log = o.Logger
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s, nil
}

// Client returns the client the store uses.
func (s *Store) Client() redis.UniversalClient { return s.client }

// As sets *target to the store's client when target is a
// *redis.UniversalClient, or a **redis.Client, **redis.ClusterClient or
// **redis.Ring matching the client's type, and reports whether it did.
func (s *Store) As(target any) bool {
	switch t := target.(type) {
	case *redis.UniversalClient:
		*t = s.client
		return true
	case **redis.Client:
		c, ok := s.client.(*redis.Client)
		if ok {
			*t = c
		}
		return ok
	case **redis.ClusterClient:
		c, ok := s.client.(*redis.ClusterClient)
		if ok {
			*t = c
		}
		return ok
	case **redis.Ring:
		c, ok := s.client.(*redis.Ring)
		if ok {
			*t = c
		}
		return ok
	}
	return false
}

// Group returns the consumer group the store reads through.
func (s *Store) Group() string { return s.group }

// Consumer returns the store's consumer name in its group.
func (s *Store) Consumer() string { return s.consumer }

// StreamKey returns the Redis key of destination's stream.
func (s *Store) StreamKey(destination string) string { return s.prefix + ":" + destination }

// MaxMessageBytes implements [broker.Limiter].
func (s *Store) MaxMessageBytes(string) int { return s.limit }

// Len returns the number of entries in destination's stream (XLEN): the
// entries not yet replayed, leased or not, unless KeepAcked is set.
func (s *Store) Len(ctx context.Context, destination string) (int64, error) {
	n, err := s.client.XLen(ctx, s.StreamKey(destination)).Result()
	if err != nil {
		return 0, fmt.Errorf("redisstream: XLEN %q: %w", destination, err)
	}
	return n, nil
}

func (s *Store) waits() bool { return s.waitReplicas > 0 || s.waitAOF }

func (s *Store) check(ctx context.Context, destination string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if destination == "" {
		return errors.New("redisstream: empty destination")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return broker.ErrClosed
	}
	return nil
}

// Publish appends m to destination's stream (XADD; with MaxEntries set,
// in a Lua script that first checks the stream's length). When it returns
// nil the entry is in the primary's memory and, as configured, in its AOF
// and on WaitReplicas replicas; see the package doc for what that
// survives.
func (s *Store) Publish(ctx context.Context, destination string, m *broker.Message) error {
	if m == nil {
		return errors.New("redisstream: nil message")
	}
	if err := s.check(ctx, destination); err != nil {
		return err
	}
	if len(m.Body) > s.limit {
		return &classify.TooLargeError{Destination: destination, Size: len(m.Body), Limit: s.limit}
	}
	key := s.StreamKey(destination)
	args := append([]any{s.maxEntries}, entryFields(m)...)
	var (
		res []any
		err error
	)
	if s.waits() {
		res, err = s.publishAndWait(ctx, destination, key, args)
	} else if s.maxEntries > 0 {
		res, err = publishScript.Run(ctx, s.client, []string{key}, args...).Slice()
	} else {
		// Without a length check the script would only XADD: send XADD
		// itself, and spare Redis the script (for a 2 KiB envelope, 12 µs
		// of server time instead of 38; see docs/benchmarks.md).
		var id string
		id, err = s.client.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: args[1:]}).Result()
		res = []any{int64(1), id}
	}
	if err != nil {
		if errors.Is(err, ErrDurabilityUnconfirmed) {
			return err
		}
		return fmt.Errorf("redisstream: publish to %q: %w", destination, err)
	}
	if len(res) != 2 {
		return fmt.Errorf("redisstream: publish to %q: unexpected script reply %v", destination, res)
	}
	if ok, _ := res[0].(int64); ok != 1 {
		n, _ := res[1].(int64)
		s.log.WarnContext(ctx, "redisstream: dead-letter stream full, write refused", "destination", destination, "entries", n, "limit", s.maxEntries)
		return &StoreFullError{Destination: destination, Entries: n, Limit: s.maxEntries}
	}
	return nil
}

// node returns the client of the node holding key, on whose connection a
// WAIT must follow the write.
func (s *Store) node(ctx context.Context, key string) (*redis.Client, error) {
	switch c := s.client.(type) {
	case *redis.Client:
		return c, nil
	case *redis.ClusterClient:
		return c.MasterForKey(ctx, key)
	case *redis.Ring:
		return c.GetShardClientForKey(key)
	}
	return nil, fmt.Errorf("redisstream: cannot WAIT through a %T", s.client)
}

// publishAndWait runs the publish script and WAIT (or WAITAOF) in one
// pipeline, so both use one connection. The script is sent whole (EVAL,
// a few hundred bytes): EVALSHA could fail with NOSCRIPT inside the
// pipeline.
func (s *Store) publishAndWait(ctx context.Context, destination, key string, args []any) ([]any, error) {
	node, err := s.node(ctx, key)
	if err != nil {
		return nil, err
	}
	timeout := s.waitTimeout.Milliseconds()
	var pub, wait *redis.Cmd
	// Pipelined's own error is the first command's; each is read below.
	_, _ = node.Pipelined(ctx, func(p redis.Pipeliner) error {
		pub = publishScript.Eval(ctx, p, []string{key}, args...)
		if s.waitAOF {
			wait = p.Do(ctx, "WAITAOF", 1, s.waitReplicas, timeout)
		} else {
			wait = p.Do(ctx, "WAIT", s.waitReplicas, timeout)
		}
		return nil
	})
	res, err := pub.Slice()
	if err != nil {
		return nil, err
	}
	if len(res) != 2 {
		return nil, fmt.Errorf("unexpected script reply %v", res)
	}
	if ok, _ := res[0].(int64); ok != 1 {
		return res, nil // refused by MaxEntries: nothing to wait for
	}
	if err := s.confirmed(wait); err != nil {
		s.log.WarnContext(ctx, "redisstream: write not confirmed", "destination", destination, "id", res[1], "err", err)
		return nil, fmt.Errorf("redisstream: publish to %q: entry %v written but %w: %w", destination, res[1], ErrDurabilityUnconfirmed, err)
	}
	return res, nil
}

func (s *Store) confirmed(wait *redis.Cmd) error {
	v, err := wait.Result()
	if err != nil {
		return err
	}
	if !s.waitAOF {
		n, _ := v.(int64)
		if n < int64(s.waitReplicas) {
			return fmt.Errorf("WAIT: %d of %d replicas acknowledged", n, s.waitReplicas)
		}
		return nil
	}
	a, _ := v.([]any)
	if len(a) != 2 {
		return fmt.Errorf("WAITAOF: unexpected reply %v", v)
	}
	local, _ := a[0].(int64)
	replicas, _ := a[1].(int64)
	if local < 1 || replicas < int64(s.waitReplicas) {
		return fmt.Errorf("WAITAOF: fsynced locally %d, on %d of %d replicas", local, replicas, s.waitReplicas)
	}
	return nil
}

// Fetch leases up to max entries of destination that match f and that no
// live lease holds, oldest first: first pending entries whose lease
// expired or that were released (taken over for this consumer), then new
// ones. Filters are evaluated in Redis on the entry's index fields; an
// entry whose body is not an envelope matches only the zero filter.
//
// Records carry the message as stored; Record.Envelope is nil (decode
// the body). If ctx ends between the script calls of a long filtered
// scan, Fetch returns what it leased so far.
func (s *Store) Fetch(ctx context.Context, destination string, f broker.Filter, max int) ([]*broker.Record, error) {
	if err := s.check(ctx, destination); err != nil {
		return nil, err
	}
	if max <= 0 {
		return nil, nil
	}
	key := s.StreamKey(destination)
	fargs := filterArgs(f)
	filtered := "0"
	if fargs != nil {
		filtered = "1"
	}
	s.mu.Lock()
	s.streams[key] = struct{}{}
	s.mu.Unlock()
	cursor := "0-0"
	var out []*broker.Record
	for len(out) < max {
		args := append([]any{s.group, s.consumer, ParkConsumer, s.ttl.Milliseconds(), max - len(out), scanBudget, cursor, filtered}, fargs...)
		res, err := fetchScript.Run(ctx, s.client, []string{key}, args...).Slice()
		if err != nil {
			if len(out) > 0 && ctx.Err() != nil {
				return out, nil
			}
			return out, fmt.Errorf("redisstream: fetch from %q: %w", destination, err)
		}
		recs, next, more, err := s.records(destination, res)
		if err != nil {
			return out, fmt.Errorf("redisstream: fetch from %q: %w", destination, err)
		}
		out = append(out, recs...)
		if !more {
			break
		}
		cursor = next
	}
	return out, nil
}

func (s *Store) records(destination string, res []any) (recs []*broker.Record, cursor string, more bool, err error) {
	if len(res) < 2 || (len(res)-2)%3 != 0 {
		return nil, "", false, fmt.Errorf("unexpected script reply of %d elements", len(res))
	}
	cursor, _ = res[0].(string)
	m, _ := res[1].(int64)
	for i := 2; i < len(res); i += 3 {
		id, _ := res[i].(string)
		n, _ := res[i+1].(int64)
		fields, _ := res[i+2].([]any)
		if id == "" || n < 1 {
			return nil, "", false, fmt.Errorf("malformed entry in script reply: %v %v", res[i], res[i+1])
		}
		recs = append(recs, &broker.Record{
			ID: id, Destination: destination, Message: message(fields, int(n)),
			Deliveries: int(n), Lease: strconv.FormatInt(n, 10) + ":" + s.consumer,
		})
	}
	return recs, cursor, m == 1, nil
}

// Ack acknowledges r (XACK, then XDEL unless KeepAcked): it is never
// delivered again. It fails with [broker.ErrLeaseLost] when the entry is no
// longer pending under r's lease: taken over after the lease expired,
// fetched again, released, or already acknowledged. The lease names its
// consumer, so any handle of the group can settle it.
func (s *Store) Ack(ctx context.Context, r *broker.Record) error {
	del := "0"
	if !s.keepAcked {
		del = "1"
	}
	return s.settle(ctx, r, "ack", del)
}

// Release hands r back at once: the entry moves to [ParkConsumer] with an
// idle time of decades, so the next Fetch of any consumer takes it over.
// Its delivery count is kept. It fails with [broker.ErrLeaseLost] like
// Ack.
func (s *Store) Release(ctx context.Context, r *broker.Record) error {
	return s.settle(ctx, r, "release", "0")
}

func (s *Store) settle(ctx context.Context, r *broker.Record, mode, del string) error {
	if r == nil {
		return errors.New("redisstream: nil record")
	}
	if err := s.check(ctx, r.Destination); err != nil {
		return err
	}
	count, consumer, ok := strings.Cut(r.Lease, ":")
	if !ok || consumer == "" || consumer == ParkConsumer {
		return fmt.Errorf("redisstream: %s %s/%s: malformed lease %q: %w", mode, r.Destination, r.ID, r.Lease, broker.ErrLeaseLost)
	}
	if _, err := strconv.ParseUint(count, 10, 63); err != nil {
		return fmt.Errorf("redisstream: %s %s/%s: malformed lease %q: %w", mode, r.Destination, r.ID, r.Lease, broker.ErrLeaseLost)
	}
	n, err := settleScript.Run(ctx, s.client, []string{s.StreamKey(r.Destination)},
		s.group, r.ID, consumer, count, mode, del, ParkConsumer).Int()
	if err != nil {
		return fmt.Errorf("redisstream: %s %s/%s: %w", mode, r.Destination, r.ID, err)
	}
	if n != 1 {
		return fmt.Errorf("redisstream: %s %s/%s: %w", mode, r.Destination, r.ID, broker.ErrLeaseLost)
	}
	return nil
}

// Close makes later operations fail with [broker.ErrClosed] and removes
// this handle's consumer from the groups it joined when it holds no
// entries (a consumer still holding leases is kept, so that its entries
// are taken over when the leases expire). It does not close the client.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	streams := make([]string, 0, len(s.streams))
	for k := range s.streams {
		streams = append(streams, k)
	}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var errs []error
	for _, key := range streams {
		if err := leaveScript.Run(ctx, s.client, []string{key}, s.group, s.consumer).Err(); err != nil {
			errs = append(errs, fmt.Errorf("redisstream: leaving group %q of %q: %w", s.group, key, err))
		}
	}
	return errors.Join(errs...)
}

func newToken() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
