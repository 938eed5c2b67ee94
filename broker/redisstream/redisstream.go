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
)

// Defaults of [Options].
const (
	// DefaultPrefix starts every stream key when [Options.Prefix] is empty.
	DefaultPrefix = "geodlq"
	// DefaultGroup is the consumer group when [Options.Group] is empty.
	DefaultGroup = "geodlq-replay"
)

const (
	defaultMaxMessageBytes = 64 << 20
	defaultLeaseTTL        = 30 * time.Second
	defaultDedupWindow     = 2 * time.Minute
	defaultWaitTimeout     = time.Second
	// defaultRetryBound bounds the retries of a write whose context has
	// no deadline: the portable store's default WriteTimeout.
	defaultRetryBound = 30 * time.Second
	// parkConsumer holds released entries and entries a filtered Fetch
	// passed over. No handle may use it as its own consumer name.
	parkConsumer = "geodlq:parked"
	// scanBudget bounds the entries one script call examines, so a
	// filtered Fetch over a long stream never blocks Redis for long;
	// Fetch calls the script again until it has max records or the stream
	// is exhausted.
	scanBudget = 1000
	// maxFields bounds the field/value arguments of one entry: Lua's
	// unpack, which hands them to XADD, takes at most about 8,000.
	maxFields = 7000
)

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

// Options configures the store. The zero value and nil are valid.
type Options struct {
	// StoreOptions: LeaseTTL is how long a fetched entry stays with its
	// consumer before another Fetch takes it over (the min-idle-time of
	// XAUTOCLAIM and XCLAIM, on the Redis server's clock), default 30s,
	// at least 1ms. MaxMessageBytes refuses larger bodies with a
	// *classify.TooLargeError; default 64 MiB (Redis itself accepts up to
	// its proto-max-bulk-len, 512 MB by default).
	broker.StoreOptions
	// Prefix starts every stream key: "<Prefix>:<destination>". The key
	// "<Prefix>" itself is the store's catalog (a hash of its
	// destinations). Default "geodlq" ([DefaultPrefix]).
	Prefix string
	// RawKeys makes the destination name the stream key itself, without
	// Prefix and without a catalog: a store over streams another program
	// writes, such as a producer's source stream read with [NewConsumer]
	// (set KeepAcked too, so that acknowledged entries stay in the
	// producer's stream). Such a store lists one named destination at a
	// time. Default false.
	RawKeys bool
	// Group is the consumer group replay reads through (XREADGROUP GROUP),
	// one per logical replayer; it is created at the stream's first entry
	// ("0") on the first Fetch. Default "geodlq-replay" ([DefaultGroup]).
	Group string
	// Consumer is this handle's consumer name in Group. It must be unique
	// per handle: a restarted process may reuse its name. Default
	// "<hostname>-<pid>-<12 random hex digits>", new for every store.
	// "geodlq:parked" is reserved.
	Consumer string
	// MaxEntries, when positive, caps a destination's stream length
	// (XLEN): Publish refuses a write to a full stream with a
	// [StoreFullError]. Entries are never trimmed (no MAXLEN or MINID).
	// With the default Ack, which deletes replayed entries, XLEN is the
	// number of entries not yet replayed; with KeepAcked it counts
	// replayed ones too. Default 0: no limit.
	MaxEntries int64
	// KeepAcked makes Ack only XACK an entry, leaving it in the stream as
	// a record of what was replayed (List shows it as replayed; Purge or
	// your own XTRIM removes it). Default false: Ack XACKs and then XDELs
	// the entry, so an acknowledgement is final for every group, not only
	// the one that replayed it.
	KeepAcked bool
	// DedupWindow is how long Publish remembers a message it wrote, by a
	// SHA-256 of its key, headers and body: a byte-identical message
	// published to the same destination within the window is not stored
	// again (Publish returns nil). It makes every retry of a write —
	// go-redis's own after a dropped connection or a read timeout, the
	// store's while it settles an uncertain outcome, the caller's after
	// an error — harmless. Default 2 minutes; negative disables it
	// (Publish then sends a bare XADD, and a write interrupted by a
	// dropped connection may be stored twice). See the package doc's
	// "Write outcomes".
	DedupWindow time.Duration
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
}

// driver is the Redis Streams [broker.Driver]. It is safe for concurrent
// use; every handle on the same Redis, prefix and group shares the data,
// with its own consumer name.
type driver struct {
	client       redis.UniversalClient
	ownsClient   bool // made by the opener: closed with the store
	prefix       string
	rawKeys      bool
	group        string
	consumer     string
	ttl          time.Duration
	limit        int
	maxEntries   int64
	keepAcked    bool
	dedup        time.Duration // 0: off
	waitReplicas int
	waitAOF      bool
	waitTimeout  time.Duration
	log          *slog.Logger

	mu         sync.Mutex
	streams    map[string]struct{} // stream keys this handle joined as a consumer
	registered map[string]struct{} // destinations this handle put in the catalog
}

var (
	_ broker.Driver  = (*driver)(nil)
	_ broker.Limiter = (*driver)(nil)
	_ broker.Aser    = (*driver)(nil)
	_ broker.Lister  = (*driver)(nil)
	_ broker.Purger  = (*driver)(nil)
)

// New returns a dead-letter store over client (a *redis.Client,
// *redis.ClusterClient, *redis.Ring or any redis.UniversalClient). It does
// no I/O. The client stays the caller's: the store never closes it.
func New(client redis.UniversalClient, opts *Options) (*broker.Store, error) {
	d, err := newDriver(client, opts)
	if err != nil {
		return nil, err
	}
	var so broker.StoreOptions
	if opts != nil {
		so = opts.StoreOptions
	}
	return broker.NewStore("redisstream", d, &so), nil
}

func newDriver(client redis.UniversalClient, opts *Options) (*driver, error) {
	if client == nil {
		return nil, fmt.Errorf("redisstream: nil client: %w", broker.ErrInvalidArgument)
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	d := &driver{
		client: client, prefix: DefaultPrefix, group: DefaultGroup, rawKeys: o.RawKeys,
		ttl: defaultLeaseTTL, limit: defaultMaxMessageBytes, dedup: defaultDedupWindow, waitTimeout: defaultWaitTimeout,
		streams: map[string]struct{}{}, registered: map[string]struct{}{}, log: o.Logger,
	}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	if o.Prefix != "" {
		d.prefix = o.Prefix
	}
	if o.Group != "" {
		d.group = o.Group
	}
	d.consumer = o.Consumer
	if d.consumer == "" {
		host, _ := os.Hostname()
		d.consumer = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), newToken(6))
	}
	switch {
	case d.consumer == parkConsumer:
		return nil, fmt.Errorf("redisstream: consumer name %q is reserved: %w", parkConsumer, broker.ErrInvalidArgument)
	case o.LeaseTTL < 0, o.MaxMessageBytes < 0, o.MaxEntries < 0, o.WaitReplicas < 0, o.WaitTimeout < 0:
		return nil, fmt.Errorf("redisstream: negative option: %w", broker.ErrInvalidArgument)
	case o.LeaseTTL > 0 && o.LeaseTTL < time.Millisecond:
		return nil, fmt.Errorf("redisstream: LeaseTTL %v is below Redis's 1ms resolution: %w", o.LeaseTTL, broker.ErrInvalidArgument)
	case o.DedupWindow > 0 && o.DedupWindow < time.Millisecond:
		return nil, fmt.Errorf("redisstream: DedupWindow %v is below Redis's 1ms resolution: %w", o.DedupWindow, broker.ErrInvalidArgument)
	}
	if o.LeaseTTL > 0 {
		d.ttl = o.LeaseTTL
	}
	if o.MaxMessageBytes > 0 {
		d.limit = o.MaxMessageBytes
	}
	switch {
	case o.DedupWindow > 0:
		d.dedup = o.DedupWindow
	case o.DedupWindow < 0:
		d.dedup = 0
	}
	d.maxEntries = o.MaxEntries
	d.keepAcked = o.KeepAcked
	d.waitReplicas, d.waitAOF = o.WaitReplicas, o.WaitAOF
	if o.WaitTimeout > 0 {
		d.waitTimeout = o.WaitTimeout
	}
	if d.waits() {
		switch client.(type) {
		case *redis.Client, *redis.ClusterClient, *redis.Ring:
		default:
			return nil, fmt.Errorf("redisstream: WaitReplicas and WaitAOF need a *redis.Client, *redis.ClusterClient or *redis.Ring (WAIT must follow the write on its connection), not %T: %w",
				client, broker.ErrInvalidArgument)
		}
	}
	return d, nil
}

// As implements [broker.Aser]: it sets *target to the store's client when
// target is a *redis.UniversalClient, or a **redis.Client,
// **redis.ClusterClient or **redis.Ring matching the client's type.
func (d *driver) As(target any) bool {
	switch t := target.(type) {
	case *redis.UniversalClient:
		*t = d.client
		return true
	case **redis.Client:
		c, ok := d.client.(*redis.Client)
		if ok {
			*t = c
		}
		return ok
	case **redis.ClusterClient:
		c, ok := d.client.(*redis.ClusterClient)
		if ok {
			*t = c
		}
		return ok
	case **redis.Ring:
		c, ok := d.client.(*redis.Ring)
		if ok {
			*t = c
		}
		return ok
	}
	return false
}

// streamKey returns the Redis key of destination's stream.
func (d *driver) streamKey(destination string) string {
	if d.rawKeys {
		return destination
	}
	return d.prefix + ":" + destination
}

// MaxMessageBytes implements [broker.Limiter].
func (d *driver) MaxMessageBytes(string) int { return d.limit }

func (d *driver) waits() bool { return d.waitReplicas > 0 || d.waitAOF }

// register puts destination in the store's catalog, once per handle.
func (d *driver) register(ctx context.Context, destination string) error {
	if d.rawKeys {
		return nil
	}
	d.mu.Lock()
	_, done := d.registered[destination]
	d.mu.Unlock()
	if done {
		return nil
	}
	if err := d.client.HSet(ctx, d.prefix, catalogLayout, layoutVersion, catalogDest+destination, "1").Err(); err != nil {
		return fmt.Errorf("registering %q in the catalog %q: %w", destination, d.prefix, err)
	}
	d.mu.Lock()
	d.registered[destination] = struct{}{}
	d.mu.Unlock()
	return nil
}

// Publish appends m to destination's stream. With deduplication on (the
// default) the XADD runs in a script that first looks the message's
// digest up, so that a retried write returns the first write's entry
// instead of adding another; the store retries an attempt whose outcome it
// could not see (a dropped connection, a timeout) until Redis answers or
// ctx ends. When it returns nil the entry is in the primary's memory and,
// as configured, in its AOF and on WaitReplicas replicas.
func (d *driver) Publish(ctx context.Context, destination string, m *broker.Message) error {
	fields := entryFields(m)
	if len(fields) > maxFields {
		return fmt.Errorf("redisstream: publish to %q: the message has %d headers; at most %d fit one entry: %w",
			destination, len(m.Headers), (maxFields-32)/2, broker.ErrInvalidArgument)
	}
	if err := d.register(ctx, destination); err != nil {
		return fmt.Errorf("redisstream: publish to %q: %w", destination, err)
	}
	key := d.streamKey(destination)
	keys := []string{key}
	if d.dedup > 0 {
		keys = append(keys, sameSlotKey(key, ":dedup:"+digest(m)))
	}
	args := append([]any{d.maxEntries, d.dedup.Milliseconds()}, fields...)
	if len(keys) == 1 && d.maxEntries <= 0 && !d.waits() {
		// Neither a digest nor a length to check: the script would only
		// XADD. Send XADD itself (BenchmarkRedisTime: 29 µs of Redis CPU
		// for a 2 KiB envelope against the script's 50). Its outcome is
		// what go-redis reports: see the package doc.
		if err := d.client.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: fields}).Err(); err != nil {
			return fmt.Errorf("redisstream: publish to %q: %w", destination, err)
		}
		return nil
	}
	var res []any
	err := retryUncertain(ctx, func() error {
		var err error
		if d.waits() {
			res, err = d.publishAndWait(ctx, destination, keys, args)
		} else {
			res, err = publishScript.Run(ctx, d.client, keys, args...).Slice()
		}
		return err
	})
	if err != nil {
		if errors.Is(err, ErrDurabilityUnconfirmed) {
			return err
		}
		return fmt.Errorf("redisstream: publish to %q: %w", destination, err)
	}
	if len(res) != 2 {
		return fmt.Errorf("redisstream: publish to %q: unexpected script reply %v", destination, res)
	}
	if ok, _ := res[0].(int64); ok == 0 {
		n, _ := res[1].(int64)
		d.log.WarnContext(ctx, "redisstream: dead-letter stream full, write refused", "destination", destination, "entries", n, "limit", d.maxEntries)
		return &StoreFullError{Destination: destination, Entries: n, Limit: d.maxEntries}
	}
	return nil
}

// retryUncertain runs attempt until it succeeds, fails with an error
// whose outcome is known (Redis answered with an error: nothing was
// written), or ctx ends. attempt must be idempotent: every attempt of a
// Publish carries the same digest, of a settle the same nonce. An attempt
// that fails on the network or a timeout may or may not have run; the
// next one finds out. Without a deadline in ctx (a Release's caller may
// give none; the portable store bounds Publish and Ack by WriteTimeout)
// it gives up after defaultRetryBound.
func retryUncertain(ctx context.Context, attempt func() error) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultRetryBound)
		defer cancel()
	}
	wait := 20 * time.Millisecond
	for {
		err := attempt()
		if err == nil || !uncertain(err) {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w: %w", broker.ErrOutcomeUnknown, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: %w (and %w)", broker.ErrOutcomeUnknown, err, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, time.Second)
	}
}

// uncertain reports whether err leaves a command's outcome unknown: not an
// error reply from Redis (the command did not run, or ran and failed
// whole), but a network failure or a timeout between sending it and
// reading its reply.
func uncertain(err error) bool {
	if err == nil || errors.Is(err, ErrDurabilityUnconfirmed) || errors.Is(err, redis.ErrClosed) {
		return false
	}
	var re redis.Error
	if errors.As(err, &re) && !strings.HasPrefix(re.Error(), "redis: ") {
		return false // a reply from the server, such as WRONGTYPE or OOM
	}
	return true
}

// node returns the client of the node holding key, on whose connection a
// WAIT must follow the write.
func (d *driver) node(ctx context.Context, key string) (*redis.Client, error) {
	switch c := d.client.(type) {
	case *redis.Client:
		return c, nil
	case *redis.ClusterClient:
		return c.MasterForKey(ctx, key)
	case *redis.Ring:
		return c.GetShardClientForKey(key)
	}
	return nil, fmt.Errorf("redisstream: cannot WAIT through a %T", d.client)
}

// publishAndWait runs the publish script and WAIT (or WAITAOF) in one
// pipeline, so both use one connection. The script is sent whole (EVAL,
// a few hundred bytes): EVALSHA could fail with NOSCRIPT inside the
// pipeline.
func (d *driver) publishAndWait(ctx context.Context, destination string, keys []string, args []any) ([]any, error) {
	node, err := d.node(ctx, keys[0])
	if err != nil {
		return nil, err
	}
	timeout := d.waitTimeout.Milliseconds()
	var pub, wait *redis.Cmd
	// Pipelined's own error is the first command's; each is read below.
	_, _ = node.Pipelined(ctx, func(p redis.Pipeliner) error {
		pub = publishScript.Eval(ctx, p, keys, args...)
		if d.waitAOF {
			wait = p.Do(ctx, "WAITAOF", 1, d.waitReplicas, timeout)
		} else {
			wait = p.Do(ctx, "WAIT", d.waitReplicas, timeout)
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
	if ok, _ := res[0].(int64); ok == 0 {
		return res, nil // refused by MaxEntries: nothing to wait for
	}
	if err := wait.Err(); uncertain(err) {
		return nil, err // the next attempt finds the written entry by its digest
	}
	if err := d.confirmed(wait); err != nil {
		d.log.WarnContext(ctx, "redisstream: write not confirmed", "destination", destination, "id", res[1], "err", err)
		return nil, fmt.Errorf("redisstream: publish to %q: entry %v written but %w: %w", destination, res[1], ErrDurabilityUnconfirmed, err)
	}
	return res, nil
}

func (d *driver) confirmed(wait *redis.Cmd) error {
	v, err := wait.Result()
	if err != nil {
		return err
	}
	if !d.waitAOF {
		n, _ := v.(int64)
		if n < int64(d.waitReplicas) {
			return fmt.Errorf("WAIT: %d of %d replicas acknowledged", n, d.waitReplicas)
		}
		return nil
	}
	a, _ := v.([]any)
	if len(a) != 2 {
		return fmt.Errorf("WAITAOF: unexpected reply %v", v)
	}
	local, _ := a[0].(int64)
	replicas, _ := a[1].(int64)
	if local < 1 || replicas < int64(d.waitReplicas) {
		return fmt.Errorf("WAITAOF: fsynced locally %d, on %d of %d replicas", local, replicas, d.waitReplicas)
	}
	return nil
}

// Fetch leases up to max entries of destination that match f and that no
// live lease holds, oldest first: first pending entries whose lease
// expired or that were released (taken over for this consumer), then new
// ones. Filters are evaluated in Redis on the entry's index fields; an
// entry whose body is not an envelope matches only the zero filter.
//
// Records carry the message as stored; Record.Envelope is nil (decode the
// body). If ctx ends between the script calls of a long filtered scan,
// Fetch returns what it leased so far. A Fetch whose reply is lost leases
// entries nobody sees; they come back after LeaseTTL.
func (d *driver) Fetch(ctx context.Context, destination string, f broker.Filter, max int) ([]*broker.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	key := d.streamKey(destination)
	fargs := filterArgs(f)
	filtered := "0"
	if fargs != nil {
		filtered = "1"
	}
	d.mu.Lock()
	d.streams[key] = struct{}{}
	d.mu.Unlock()
	cursor := "0-0"
	var out []*broker.Record
	for len(out) < max {
		args := append([]any{d.group, d.consumer, parkConsumer, d.ttl.Milliseconds(), max - len(out), scanBudget, cursor, filtered}, fargs...)
		// The entries' idle time starts on the server after this moment.
		expires := time.Now().Add(d.ttl)
		res, err := fetchScript.Run(ctx, d.client, []string{key}, args...).Slice()
		if err != nil {
			if len(out) > 0 && ctx.Err() != nil {
				return out, nil
			}
			return out, fmt.Errorf("redisstream: fetch from %q: %w", destination, err)
		}
		recs, next, more, err := d.records(destination, res)
		if err != nil {
			return out, fmt.Errorf("redisstream: fetch from %q: %w", destination, err)
		}
		for _, r := range recs {
			r.LeaseExpires = expires
		}
		out = append(out, recs...)
		if !more || ctx.Err() != nil {
			break
		}
		cursor = next
	}
	return out, nil
}

func (d *driver) records(destination string, res []any) (recs []*broker.Record, cursor string, more bool, err error) {
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
			Deliveries: int(n), Lease: strconv.FormatInt(n, 10) + ":" + d.consumer,
		})
	}
	return recs, cursor, m == 1, nil
}

// Ack acknowledges r (XACK, then XDEL unless KeepAcked): it is never
// delivered again. It fails with [broker.ErrLeaseLost] when the entry is no
// longer pending under r's lease: taken over after the lease expired,
// fetched again, released, or already acknowledged. The lease names its
// consumer, so any handle of the group can settle it.
func (d *driver) Ack(ctx context.Context, r *broker.Record) error {
	del := "0"
	if !d.keepAcked {
		del = "1"
	}
	return d.settle(ctx, r, "ack", del)
}

// Release hands r back at once: the entry moves to the park consumer with
// an idle time of decades, so the next Fetch of any consumer takes it
// over. Its delivery count is kept. It fails with [broker.ErrLeaseLost]
// like Ack.
func (d *driver) Release(ctx context.Context, r *broker.Record) error {
	return d.settle(ctx, r, "release", "0")
}

// Renew resets the idle time of r's pending entry, so that no Fetch takes
// it over for another LeaseTTL, if the entry is still pending for r's
// consumer with r's delivery count (atomically, in Lua); otherwise it
// fails with [broker.ErrLeaseLost]. Like Ack, any handle of the group may
// renew a record whose Lease it is given. A lost reply is retried.
func (d *driver) Renew(ctx context.Context, r *broker.Record) error {
	count, consumer, err := d.leaseOf(r, "renew")
	if err != nil {
		return err
	}
	key := d.streamKey(r.Destination)
	expires := time.Now().Add(d.ttl)
	var n int
	err = retryUncertain(ctx, func() error {
		var err error
		n, err = renewScript.Run(ctx, d.client, []string{key}, d.group, r.ID, consumer, count).Int()
		return err
	})
	if err != nil {
		return fmt.Errorf("redisstream: renew %s/%s: %w", r.Destination, r.ID, err)
	}
	if n != 1 {
		return fmt.Errorf("redisstream: renew %s/%s: %w", r.Destination, r.ID, broker.ErrLeaseLost)
	}
	r.LeaseExpires = expires
	return nil
}

// leaseOf parses r's lease for op: its delivery count and consumer.
func (d *driver) leaseOf(r *broker.Record, op string) (count, consumer string, err error) {
	count, consumer, ok := strings.Cut(r.Lease, ":")
	if !ok || consumer == "" || consumer == parkConsumer {
		return "", "", fmt.Errorf("redisstream: %s %s/%s: malformed lease %q: %w", op, r.Destination, r.ID, r.Lease, broker.ErrLeaseLost)
	}
	if _, err := strconv.ParseUint(count, 10, 63); err != nil {
		return "", "", fmt.Errorf("redisstream: %s %s/%s: malformed lease %q: %w", op, r.Destination, r.ID, r.Lease, broker.ErrLeaseLost)
	}
	if !validID(r.ID) {
		return "", "", fmt.Errorf("redisstream: %s %s/%s: not a stream entry id: %w", op, r.Destination, r.ID, broker.ErrLeaseLost)
	}
	return count, consumer, nil
}

func (d *driver) settle(ctx context.Context, r *broker.Record, mode, del string) error {
	count, consumer, ok := strings.Cut(r.Lease, ":")
	if !ok || consumer == "" || consumer == parkConsumer {
		return fmt.Errorf("redisstream: %s %s/%s: malformed lease %q: %w", mode, r.Destination, r.ID, r.Lease, broker.ErrLeaseLost)
	}
	if _, err := strconv.ParseUint(count, 10, 63); err != nil {
		return fmt.Errorf("redisstream: %s %s/%s: malformed lease %q: %w", mode, r.Destination, r.ID, r.Lease, broker.ErrLeaseLost)
	}
	if !validID(r.ID) {
		return fmt.Errorf("redisstream: %s %s/%s: not a stream entry id: %w", mode, r.Destination, r.ID, broker.ErrLeaseLost)
	}
	key := d.streamKey(r.Destination)
	// The nonce marks this call: a retry of the same call (go-redis's, or
	// ours after an uncertain failure) finds its own mark and succeeds; a
	// second call fails with ErrLeaseLost.
	nonce := newToken(12)
	window := max(d.dedup, defaultDedupWindow).Milliseconds()
	var n int
	err := retryUncertain(ctx, func() error {
		var err error
		n, err = settleScript.Run(ctx, d.client, []string{key, sameSlotKey(key, ":settled:"+r.ID)},
			d.group, r.ID, consumer, count, mode, del, parkConsumer, nonce, window).Int()
		return err
	})
	if err != nil {
		return fmt.Errorf("redisstream: %s %s/%s: %w", mode, r.Destination, r.ID, err)
	}
	if n != 1 {
		return fmt.Errorf("redisstream: %s %s/%s: %w", mode, r.Destination, r.ID, broker.ErrLeaseLost)
	}
	return nil
}

// Close removes this handle's consumer from the groups it joined when it
// holds no entries (a consumer still holding leases is kept, so that its
// entries are taken over when the leases expire), then closes the client
// if the store opened it itself ([broker.OpenStore]); a client given to
// [New] stays open.
func (d *driver) Close() error {
	d.mu.Lock()
	streams := make([]string, 0, len(d.streams))
	for k := range d.streams {
		streams = append(streams, k)
	}
	d.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var errs []error
	for _, key := range streams {
		if err := leaveScript.Run(ctx, d.client, []string{key}, d.group, d.consumer).Err(); err != nil {
			errs = append(errs, fmt.Errorf("redisstream: leaving group %q of %q: %w", d.group, key, err))
		}
	}
	if d.ownsClient {
		if err := d.client.Close(); err != nil {
			errs = append(errs, fmt.Errorf("redisstream: closing the client: %w", err))
		}
	}
	return errors.Join(errs...)
}

func newToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
