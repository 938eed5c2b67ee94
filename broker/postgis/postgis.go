package postgis

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/pgmigrate"
)

// Defaults of [Options].
const (
	DefaultSchema          = "geodlq"
	DefaultTable           = "dead_letters"
	DefaultLeaseTTL        = 30 * time.Second
	DefaultMaxMessageBytes = 64 << 20
)

// Status values of the status column.
const (
	StatusPending  = "pending"
	StatusLeased   = "leased"
	StatusReplayed = "replayed"
)

// Geometry status values of the geom_status column: why geom is or is not
// set.
const (
	// GeomParsed: geom holds the inline geometry as PostGIS parsed it.
	GeomParsed = "parsed"
	// GeomUnparseable: ST_GeomFromGeoJSON refused the inline geometry;
	// geom_error has its message.
	GeomUnparseable = "unparseable"
	// GeomNotText: the inline geometry is not UTF-8 text (base64 in the
	// envelope), so PostGIS cannot be given it.
	GeomNotText = "not_text"
	// GeomMissing: the event had no geometry (the envelope's placeholder
	// is not stored).
	GeomMissing = "missing"
	// GeomOffloaded: the geometry was offloaded; offload_uri points at it.
	GeomOffloaded = "offloaded"
	// GeomNone: the body is not a dlq.v1 envelope.
	GeomNone = "none"
)

// ErrDeadLetteredAgain is returned (wrapping [broker.ErrLeaseLost]) by
// [Store.Ack] when a write with the record's idempotency key arrived while
// the record was leased: the event failed again, perhaps as the very copy
// the replayer re-injected, so the record is returned to pending instead of
// being marked replayed.
var ErrDeadLetteredAgain = errors.New("postgis: the event was dead-lettered again while leased; the record is pending again")

// Options configures a [Store]. Nil means defaults.
type Options struct {
	// Schema is the PostgreSQL schema holding the table (created by
	// Migrate). Lower-case letters, digits and underscores. Default
	// "geodlq".
	Schema string
	// Table is the dead-letter table's name; its indexes, helper functions
	// and the {Table}_migrations table are named after it. Lower-case
	// letters, digits and underscores, at most 40 bytes. Default
	// "dead_letters".
	Table string
	// LeaseTTL is how long a fetched record stays invisible to other
	// fetchers (lease_until = now() + LeaseTTL on the database's clock),
	// like SQS's visibility timeout. Default 30s.
	LeaseTTL time.Duration
	// MaxMessageBytes refuses larger bodies with [classify.ErrTooLarge]. A
	// row holds the body twice (bytea and jsonb), so keep it well under
	// PostgreSQL's 1 GB field limit. Default 64 MiB.
	MaxMessageBytes int
	// Migrate runs [Store.Migrate] in New. Default false: run migrations
	// as a deployment step, as River's rivermigrate does.
	Migrate bool
	// Logger receives a debug record per duplicate write and per geometry
	// PostGIS cannot parse. Nil discards.
	Logger *slog.Logger
}

// Store is a dead-letter store in one PostGIS table. It is safe for
// concurrent use, and any number of processes may share the table.
type Store struct {
	pool    *pgxpool.Pool
	schema  string // bare
	schemaQ string // quoted
	name    string // bare table name
	table   string // quoted, schema-qualified
	ttl     time.Duration
	limit   int
	log     *slog.Logger

	insertSQL, fetchSQL, ackSQL, releaseSQL string
}

var (
	_ broker.Publisher        = (*Store)(nil)
	_ broker.DeadLetterSource = (*Store)(nil)
	_ broker.Limiter          = (*Store)(nil)
)

// New returns a store on pool, which the caller keeps owning (and
// closes). It performs no I/O unless opts.Migrate is set.
func New(ctx context.Context, pool *pgxpool.Pool, opts *Options) (*Store, error) {
	if pool == nil {
		return nil, errors.New("postgis: nil pool")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Schema == "" {
		o.Schema = DefaultSchema
	}
	if o.Table == "" {
		o.Table = DefaultTable
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = DefaultLeaseTTL
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if err := pgmigrate.CheckIdent("postgis", "schema", o.Schema, 63); err != nil {
		return nil, err
	}
	if err := pgmigrate.CheckIdent("postgis", "table", o.Table, 40); err != nil {
		return nil, err
	}
	s := &Store{
		pool:    pool,
		schema:  o.Schema,
		schemaQ: pgx.Identifier{o.Schema}.Sanitize(),
		name:    o.Table,
		table:   pgx.Identifier{o.Schema, o.Table}.Sanitize(),
		ttl:     o.LeaseTTL,
		limit:   o.MaxMessageBytes,
		log:     o.Logger,
	}
	s.insertSQL = s.render(insertSQL)
	s.fetchSQL = s.render(fetchSQL)
	s.ackSQL = s.render(ackSQL)
	s.releaseSQL = s.render(releaseSQL)
	if o.Migrate {
		if err := s.Migrate(ctx); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Pool returns the pool the store uses.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Table returns the quoted, schema-qualified table name, for your own
// queries: "geodlq"."dead_letters" by default.
func (s *Store) Table() string { return s.table }

// As sets *i to the store's pool when i is a **pgxpool.Pool, and reports
// whether it did.
func (s *Store) As(i any) bool {
	if p, ok := i.(**pgxpool.Pool); ok {
		*p = s.pool
		return true
	}
	return false
}

// MaxMessageBytes implements [broker.Limiter]: the same limit for every
// destination.
func (s *Store) MaxMessageBytes(string) int { return s.limit }

// WriteResult reports what [Store.Write] did.
type WriteResult struct {
	// ID is the row id: the new row, or the existing row a duplicate
	// matched.
	ID int64
	// Duplicate is true when a record with the same idempotency key was
	// already pending or leased in the destination, so nothing was
	// inserted.
	Duplicate bool
	// GeometryStatus is the row's geom_status: whether PostGIS parsed the
	// geometry (GeomParsed) or why geom is NULL.
	GeometryStatus string
	// GeometryError is PostGIS's message when GeometryStatus is
	// GeomUnparseable.
	GeometryError string
}

// scan reads the insert's RETURNING row.
func (res *WriteResult) scan(row pgx.Row) error {
	var inserted bool
	if err := row.Scan(&res.ID, &inserted, &res.GeometryStatus, &res.GeometryError); err != nil {
		return err
	}
	res.Duplicate = !inserted
	return nil
}

// Publish implements [broker.Publisher] with [Store.Write].
func (s *Store) Publish(ctx context.Context, destination string, m *broker.Message) error {
	_, err := s.Write(ctx, destination, m)
	return err
}

// Write inserts m into destination in one statement (its own transaction)
// and returns when it is committed: durable as far as the server's
// synchronous_commit setting makes commits durable ("on", the default,
// waits for the WAL flush and any synchronous standbys).
//
// A message whose idempotency key (the envelope's, else the
// idempotency-key header) matches a record of destination that is pending
// or leased is a duplicate: nothing is inserted, the existing row's
// duplicates count and last_duplicate_at are updated, and Write succeeds,
// so a dead-letter write retried after a timeout is harmless. Once a
// record is replayed its key is free again: a later failure of the same
// event is a new record. A duplicate that arrives while the record is
// leased also marks it, so that the replayer's Ack fails with
// [ErrDeadLetteredAgain] rather than losing the new failure.
func (s *Store) Write(ctx context.Context, destination string, m *broker.Message) (WriteResult, error) {
	if err := ctx.Err(); err != nil {
		return WriteResult{}, err
	}
	r, err := s.prepare(destination, m)
	if err != nil {
		return WriteResult{}, err
	}
	var res WriteResult
	if err := res.scan(s.pool.QueryRow(ctx, s.insertSQL, r.args()...)); err != nil {
		return WriteResult{}, fmt.Errorf("postgis: publish to %q: %w", destination, err)
	}
	s.logWrite(ctx, destination, r, res)
	return res, nil
}

// PublishBatch writes msgs to destination in one transaction, the inserts
// pipelined as one pgx batch: all are stored or none. Duplicates are handled as by
// [Store.Write], also within the batch. A message over the limit fails the
// whole batch before anything is sent.
func (s *Store) PublishBatch(ctx context.Context, destination string, msgs []*broker.Message) ([]WriteResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rows := make([]*row, len(msgs))
	for i, m := range msgs {
		r, err := s.prepare(destination, m)
		if err != nil {
			return nil, fmt.Errorf("postgis: batch message %d: %w", i, err)
		}
		rows[i] = r
	}
	if len(rows) == 0 {
		return nil, nil
	}
	out := make([]WriteResult, len(rows))
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		for _, r := range rows {
			b.Queue(s.insertSQL, r.args()...)
		}
		br := tx.SendBatch(ctx, b)
		for i := range rows {
			if err := out[i].scan(br.QueryRow()); err != nil {
				_ = br.Close()
				return fmt.Errorf("message %d: %w", i, err)
			}
		}
		return br.Close()
	})
	if err != nil {
		return nil, fmt.Errorf("postgis: publish batch to %q: %w", destination, err)
	}
	for i, r := range rows {
		s.logWrite(ctx, destination, r, out[i])
	}
	return out, nil
}

func (s *Store) logWrite(ctx context.Context, destination string, r *row, res WriteResult) {
	switch {
	case res.Duplicate:
		s.log.DebugContext(ctx, "geodlq: duplicate dead-letter write absorbed",
			slog.String("destination", destination), slog.Int64("id", res.ID), slog.String("idempotency_key", deref(r.idemKey)))
	case res.GeometryStatus == GeomUnparseable:
		s.log.DebugContext(ctx, "geodlq: PostGIS cannot parse the geometry; stored without it",
			slog.String("destination", destination), slog.Int64("id", res.ID), slog.String("event_id", deref(r.eventID)),
			slog.String("error", res.GeometryError))
	}
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// row is a message turned into the insert's parameters. Pointers are NULL
// when nil.
type row struct {
	destination   string
	key           []byte
	headers       string
	binaryHeaders *string
	body          []byte
	isEnvelope    bool
	envelopeText  *string
	eventID       *string
	idemKey       *string
	class, stage  *string
	epsg          *int64
	kind, reason  *string
	topic         *string
	deadAt        *time.Time
	deadNs        *int16
	geojson       *string
	geomStatus    string
	offloadURI    *string
	locX, locY    *float64
	srid          int32
}

func (r *row) args() []any {
	return []any{
		r.destination, r.key, r.headers, r.binaryHeaders, r.body, r.isEnvelope, r.envelopeText,
		r.eventID, r.idemKey, r.class, r.stage, r.epsg, r.kind, r.reason, r.topic, r.deadAt, r.deadNs,
		r.geojson, r.geomStatus, r.offloadURI, r.locX, r.locY, r.srid,
	}
}

const insertSQL = `
INSERT INTO {t} AS d (destination, msg_key, headers, binary_headers, body, is_envelope, envelope,
	event_id, idempotency_key, failure_class, failed_stage, epsg, reason_kind, reason, source_topic,
	dead_lettered_at, dead_lettered_ns, geom, geom_status, geom_error, offload_uri, location)
SELECT $1::text, $2::bytea, $3::text::jsonb, $4::text::jsonb, $5::bytea, $6::boolean, {s}.{n}_to_jsonb($7::text),
	$8::text, $9::text, $10::text, $11::text, $12::bigint, $13::text, $14::text, $15::text,
	$16::timestamptz, $17::smallint,
	g.geom,
	CASE WHEN $18::text IS NULL THEN $19::text WHEN g.geom IS NULL THEN 'unparseable' ELSE 'parsed' END,
	g.err, $20::text,
	CASE WHEN $21::float8 IS NULL OR $22::float8 IS NULL THEN NULL ELSE ST_SetSRID(ST_MakePoint($21, $22), $23) END
FROM {s}.{n}_parse_geojson($18::text, $23::integer) AS g
ON CONFLICT (destination, idempotency_key) WHERE replayed_at IS NULL
DO UPDATE SET duplicates = d.duplicates + 1, last_duplicate_at = now(),
	redead_lettered = d.redead_lettered OR d.status = 'leased'
RETURNING id, (xmax = 0), geom_status, COALESCE(geom_error, '')`

// maxSRID is PostGIS's SRID_USER_MAXIMUM; larger EPSG codes are stored
// with SRID 0 (their code stays in the epsg column).
const maxSRID = 998999

func (s *Store) prepare(destination string, m *broker.Message) (*row, error) {
	if m == nil {
		return nil, errors.New("postgis: nil message")
	}
	if destination == "" || !cleanText(destination) {
		return nil, fmt.Errorf("postgis: destination %q must be non-empty UTF-8 without NUL", destination)
	}
	if len(m.Body) > s.limit {
		return nil, &classify.TooLargeError{Destination: destination, Size: len(m.Body), Limit: s.limit}
	}
	r := &row{destination: destination, key: m.Key, body: m.Body, geomStatus: GeomNone}
	if r.body == nil {
		r.body = []byte{}
	}
	var err error
	if r.headers, r.binaryHeaders, err = encodeHeaders(m.Headers); err != nil {
		return nil, err
	}
	env, derr := broker.EnvelopeOf(m)
	if derr != nil {
		if k := m.Header(broker.HeaderIdempotencyKey); k != "" {
			r.idemKey = ptr(keyText(k))
		}
		return r, nil
	}
	r.isEnvelope = true
	if utf8.Valid(m.Body) && !slices.Contains(m.Body, 0) {
		r.envelopeText = ptr(string(m.Body))
	}
	r.eventID = ptr(keyText(env.EventID))
	r.idemKey = ptr(keyText(env.IdempotencyKey))
	r.class = ptr(env.FailureClass.String())
	r.stage = ptr(env.FailedStage.String())
	r.epsg = ptr(int64(broker.EPSGOf(env)))
	at := env.DeadLetteredAt
	r.deadAt, r.deadNs = &at, ptr(int16(at.Nanosecond()%1000))
	if env.Source != nil && env.Source.Topic != "" {
		r.topic = ptr(lossyText(env.Source.Topic))
	}
	r.srid = sridOf(env)
	if ge := env.GeometryError; ge != nil {
		if ge.Kind != "" {
			r.kind = ptr(lossyText(ge.Kind))
		}
		r.reason = ptr(lossyText(ge.Reason))
		if len(ge.Location) == 2 && finite(ge.Location[0]) && finite(ge.Location[1]) {
			r.locX, r.locY = &ge.Location[0], &ge.Location[1]
		}
	}
	g := env.Geometry
	switch {
	case g.OffloadURI != "":
		r.geomStatus, r.offloadURI = GeomOffloaded, ptr(lossyText(g.OffloadURI))
	case g.Missing:
		r.geomStatus = GeomMissing
	case !utf8.Valid(g.Inline) || slices.Contains(g.Inline, 0):
		r.geomStatus = GeomNotText
	default:
		r.geojson = ptr(string(g.Inline))
	}
	return r, nil
}

// sridOf is the SRID the geometry is stored with: the EPSG code the
// envelope records (broker.EPSGOf), else 4326 when the payload declared no
// CRS (RFC 7946's OGC:CRS84, lon/lat on WGS 84), else 0 (unknown).
func sridOf(e *envelope.Envelope) int32 {
	if code := broker.EPSGOf(e); code > 0 {
		if code <= maxSRID {
			return int32(code)
		}
		return 0
	}
	if strings.TrimSpace(e.SourceCRS) == "" {
		return 4326
	}
	return 0
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

func ptr[T any](v T) *T { return &v }

// cleanText reports whether s can be stored in a text column as is.
func cleanText(s string) bool { return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 }

func lossyText(s string) string {
	if cleanText(s) {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// hexPrefix marks a key or event id stored hex-encoded because it is not
// clean text (or starts with the prefix itself), which keeps the mapping
// one-to-one.
const hexPrefix = "geodlq-hex:"

// keyText maps s, one to one, to a value a text column accepts.
func keyText(s string) string {
	if cleanText(s) && !strings.HasPrefix(s, hexPrefix) {
		return s
	}
	return hexPrefix + hex.EncodeToString([]byte(s))
}

// encodeHeaders splits headers into a JSON object of the text-safe ones
// and, when any key or value is not clean text, a JSON array of base64
// [key, value] pairs for the others, so every header survives byte for
// byte.
func encodeHeaders(h map[string]string) (string, *string, error) {
	clean := make(map[string]string, len(h))
	var binary [][2]string
	for k, v := range h {
		if cleanText(k) && cleanText(v) {
			clean[k] = v
			continue
		}
		binary = append(binary, [2]string{base64.StdEncoding.EncodeToString([]byte(k)), base64.StdEncoding.EncodeToString([]byte(v))})
	}
	cj, err := json.Marshal(clean)
	if err != nil {
		return "", nil, fmt.Errorf("postgis: encoding headers: %w", err)
	}
	if len(binary) == 0 {
		return string(cj), nil, nil
	}
	slices.SortFunc(binary, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	bj, err := json.Marshal(binary)
	if err != nil {
		return "", nil, fmt.Errorf("postgis: encoding headers: %w", err)
	}
	return string(cj), ptr(string(bj)), nil
}

func decodeHeaders(clean map[string]string, binary []byte) (map[string]string, error) {
	if len(binary) == 0 {
		return clean, nil
	}
	var pairs [][2]string
	if err := json.Unmarshal(binary, &pairs); err != nil {
		return nil, fmt.Errorf("binary headers: %w", err)
	}
	if clean == nil {
		clean = make(map[string]string, len(pairs))
	}
	for _, p := range pairs {
		k, err := base64.StdEncoding.DecodeString(p[0])
		if err != nil {
			return nil, fmt.Errorf("binary header key: %w", err)
		}
		v, err := base64.StdEncoding.DecodeString(p[1])
		if err != nil {
			return nil, fmt.Errorf("binary header value: %w", err)
		}
		clean[string(k)] = string(v)
	}
	return clean, nil
}

const fetchSQL = `
WITH picked AS (
	SELECT id FROM {t}
	WHERE destination = $1 AND replayed_at IS NULL AND (status = 'pending' OR lease_until <= now()) {filter}
	ORDER BY id
	LIMIT $2
	FOR UPDATE SKIP LOCKED
)
UPDATE {t} AS d SET status = 'leased', lease_token = gen_random_uuid()::text,
	lease_until = now() + $3::bigint * interval '1 microsecond',
	deliveries = d.deliveries + 1, redead_lettered = false
FROM picked WHERE d.id = picked.id
RETURNING d.id, d.msg_key, d.headers, d.binary_headers, d.body, d.deliveries, d.lease_token`

// Fetch leases up to max pending records of destination that match f,
// oldest (lowest id) first, in one statement: a SELECT … FOR UPDATE SKIP
// LOCKED picks rows no other transaction holds, and the same statement's
// UPDATE marks them leased until now() + LeaseTTL on the database's clock,
// so concurrent fetchers never take the same row. Records whose lease
// expired are pending again. Bodies that are not envelopes match only the
// zero filter.
func (s *Store) Fetch(ctx context.Context, destination string, f broker.Filter, max int) ([]*broker.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if max <= 0 {
		return nil, nil
	}
	a := &sqlArgs{list: []any{destination, max, s.ttl.Microseconds()}}
	cond := where(f, a)
	q := strings.Replace(s.fetchSQL, "{filter}", cond, 1)
	rows, err := s.pool.Query(ctx, q, a.list...)
	if err != nil {
		return nil, fmt.Errorf("postgis: fetch from %q: %w", destination, err)
	}
	defer rows.Close()
	var out []*broker.Record
	for rows.Next() {
		var (
			id      int64
			key     []byte
			headers map[string]string
			binary  []byte
			body    []byte
			deliv   int
			token   string
		)
		if err := rows.Scan(&id, &key, &headers, &binary, &body, &deliv, &token); err != nil {
			return nil, fmt.Errorf("postgis: fetch from %q: %w", destination, err)
		}
		h, err := decodeHeaders(headers, binary)
		if err != nil {
			return nil, fmt.Errorf("postgis: record %d: %w", id, err)
		}
		out = append(out, &broker.Record{
			ID: strconv.FormatInt(id, 10), Destination: destination,
			Message:    &broker.Message{Key: key, Body: body, Headers: h, DeliveryAttempt: deliv},
			Deliveries: deliv, Lease: token,
		})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgis: fetch from %q: %w", destination, err)
	}
	// RETURNING order is unspecified; restore id order.
	slices.SortFunc(out, func(a, b *broker.Record) int {
		x, _ := strconv.ParseInt(a.ID, 10, 64)
		y, _ := strconv.ParseInt(b.ID, 10, 64)
		return cmpInt(x, y)
	})
	return out, nil
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

const ackSQL = `
UPDATE {t} SET
	status = CASE WHEN redead_lettered THEN 'pending' ELSE 'replayed' END,
	replayed_at = CASE WHEN redead_lettered THEN NULL ELSE now() END,
	lease_token = NULL, lease_until = NULL, redead_lettered = false
WHERE id = $1 AND destination = $2 AND lease_token = $3 AND status = 'leased'
RETURNING status`

const releaseSQL = `
UPDATE {t} SET status = 'pending', lease_token = NULL, lease_until = NULL, redead_lettered = false
WHERE id = $1 AND destination = $2 AND lease_token = $3 AND status = 'leased'
RETURNING status`

// Ack marks r replayed (the row is kept; see [Store.Purge]). It succeeds
// while r's lease token is still the row's — even after lease_until
// passed, as long as no one fetched the row since — and otherwise fails
// with an error wrapping [broker.ErrLeaseLost]. If the event was
// dead-lettered again during the lease, the row goes back to pending and
// the error also wraps [ErrDeadLetteredAgain].
func (s *Store) Ack(ctx context.Context, r *broker.Record) error {
	st, err := s.settle(ctx, r, s.ackSQL)
	if err != nil {
		return err
	}
	if st != StatusReplayed {
		return fmt.Errorf("postgis: record %s/%s: %w: %w", r.Destination, r.ID, broker.ErrLeaseLost, ErrDeadLetteredAgain)
	}
	return nil
}

// Release makes r pending again at once. It fails with an error wrapping
// [broker.ErrLeaseLost] when r's lease was lost.
func (s *Store) Release(ctx context.Context, r *broker.Record) error {
	_, err := s.settle(ctx, r, s.releaseSQL)
	return err
}

func (s *Store) settle(ctx context.Context, r *broker.Record, q string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if r == nil {
		return "", errors.New("postgis: nil record")
	}
	id, err := strconv.ParseInt(r.ID, 10, 64)
	if err != nil || r.Lease == "" {
		return "", fmt.Errorf("postgis: record %s/%s was not leased from this store: %w", r.Destination, r.ID, broker.ErrLeaseLost)
	}
	var st string
	err = s.pool.QueryRow(ctx, q, id, r.Destination, r.Lease).Scan(&st)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("postgis: record %s/%s: %w", r.Destination, r.ID, broker.ErrLeaseLost)
	}
	if err != nil {
		return "", fmt.Errorf("postgis: record %s/%s: %w", r.Destination, r.ID, err)
	}
	return st, nil
}

// Purge deletes the records of destination ("" for all) that were
// replayed before t, and returns how many. Pending and leased records are
// never purged.
func (s *Store) Purge(ctx context.Context, destination string, before time.Time) (int64, error) {
	q := `DELETE FROM ` + s.table + ` WHERE replayed_at IS NOT NULL AND replayed_at < $1`
	args := []any{before}
	if destination != "" {
		q += ` AND destination = $2`
		args = append(args, destination)
	}
	tag, err := s.pool.Exec(ctx, q, args...)
	if err != nil {
		return 0, fmt.Errorf("postgis: purge: %w", err)
	}
	return tag.RowsAffected(), nil
}
