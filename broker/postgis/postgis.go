package postgis

import (
	"cmp"
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
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/txretry"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/pgmigrate"
)

// Defaults of [Options].
const (
	defaultSchema          = "geodlq"
	defaultTable           = "dead_letters"
	defaultLeaseTTL        = 30 * time.Second
	defaultMaxMessageBytes = 64 << 20
)

// Geometry status values of the geom_status column: why geom is or is not
// set (see the package doc).
const (
	geomParsed      = "parsed"
	geomUnparseable = "unparseable"
	geomNotText     = "not_text"
	geomMissing     = "missing"
	geomOffloaded   = "offloaded"
	geomNone        = "none"
)

// ErrDeadLetteredAgain is wrapped, with [broker.ErrLeaseLost], by the
// error of an Ack when a write with the record's idempotency key arrived
// while the record was leased: the event failed again, perhaps as the very
// copy the replayer re-injected, so the record is returned to pending
// instead of being marked replayed.
var ErrDeadLetteredAgain = errors.New("postgis: the event was dead-lettered again while leased; the record is pending again")

// Options configures the store [New] returns. Nil means defaults.
type Options struct {
	// StoreOptions: LeaseTTL is how long a fetched record stays invisible
	// to other fetchers (lease_until = now() + LeaseTTL on the database's
	// clock, to the microsecond); default 30s. MaxMessageBytes refuses
	// larger bodies with a [*classify.TooLargeError]; default 64 MiB (a
	// row holds the body twice, bytea and jsonb, so keep it well under
	// PostgreSQL's 1 GB field limit). Logger also receives a debug record
	// per duplicate write absorbed and per geometry PostGIS cannot parse.
	broker.StoreOptions
	// Schema is the PostgreSQL schema holding the table (created by
	// Create). Lower-case letters, digits and underscores, at most 63
	// bytes. Default "geodlq".
	Schema string
	// Table is the dead-letter table's name; its indexes, helper functions
	// and the {Table}_migrations table are named after it. Lower-case
	// letters, digits and underscores, at most 40 bytes. Default
	// "dead_letters".
	Table string
	// Create runs the store's [Migrations] in New: it creates the schema
	// and table when the database lacks them and applies the steps an
	// older table lacks (the name every adapter and broker.OpenOptions
	// give this). Default false: New does no I/O, and migrations run as a
	// deployment step (New with Create, or broker.OpenStore with Create),
	// as River's rivermigrate does.
	Create bool
}

// driver is the PostGIS [broker.Driver]. It is safe for concurrent use,
// and any number of processes may share the table.
type driver struct {
	pool     *pgxpool.Pool
	ownsPool bool   // opened by the URL opener: closed with the store
	schema   string // bare
	schemaQ  string // quoted
	name     string // bare table name
	table    string // quoted, schema-qualified
	ttl      time.Duration
	limit    int
	log      *slog.Logger

	insertSQL, insertOldSQL, fetchSQL, ackSQL, releaseSQL, renewSQL string
	renewBatchSQL, ackBatchSQL                                      string

	// version is the table's schema version as last read, versionAt when
	// (see [driver.current]).
	version, versionAt atomic.Int64
	// sinceCompact counts the rows written, acknowledged or deleted since
	// the count log was last folded (see [driver.wrote]).
	sinceCompact atomic.Int64
}

var (
	_ broker.Driver  = (*driver)(nil)
	_ broker.Limiter = (*driver)(nil)
	_ broker.Lister  = (*driver)(nil)
	_ broker.Statser = (*driver)(nil)
	_ broker.Purger  = (*driver)(nil)
	_ broker.Aser    = (*driver)(nil)
	_ broker.Batcher = (*driver)(nil)

	_ broker.BatchSettler = (*driver)(nil)
)

// New returns a dead-letter store in a PostGIS table reached through pool,
// which the caller keeps owning (closing the store does not close it). It
// performs no I/O unless opts.Create is set; ctx bounds the migration.
// Give the pool a connect timeout (connect_timeout in its DSN, or
// ConnConfig.ConnectTimeout): pgxpool's own waits two minutes for a server
// that accepts connections and never answers. broker.OpenStore sets one.
func New(ctx context.Context, pool *pgxpool.Pool, opts *Options) (*broker.Store, error) {
	if pool == nil {
		return nil, fmt.Errorf("postgis: nil pool: %w", broker.ErrInvalidArgument)
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	d, err := newDriver(pool, &o, false)
	if err != nil {
		return nil, err
	}
	if o.Create {
		if err := d.migrate(ctx); err != nil {
			return nil, err
		}
	}
	return broker.NewStore("postgis", d, &o.StoreOptions), nil
}

// newDriver validates o and fills in its defaults. It does no I/O.
func newDriver(pool *pgxpool.Pool, o *Options, owns bool) (*driver, error) {
	if o.Schema == "" {
		o.Schema = defaultSchema
	}
	if o.Table == "" {
		o.Table = defaultTable
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = defaultLeaseTTL
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = defaultMaxMessageBytes
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if err := pgmigrate.CheckIdent("postgis", "schema", o.Schema, 63); err != nil {
		return nil, fmt.Errorf("%w: %w", err, broker.ErrInvalidArgument)
	}
	if err := pgmigrate.CheckIdent("postgis", "table", o.Table, 40); err != nil {
		return nil, fmt.Errorf("%w: %w", err, broker.ErrInvalidArgument)
	}
	d := &driver{
		pool:     pool,
		ownsPool: owns,
		schema:   o.Schema,
		schemaQ:  pgx.Identifier{o.Schema}.Sanitize(),
		name:     o.Table,
		table:    pgx.Identifier{o.Schema, o.Table}.Sanitize(),
		ttl:      o.LeaseTTL,
		limit:    o.MaxMessageBytes,
		log:      o.Logger,
	}
	d.insertSQL = d.render(insertSQL)
	d.insertOldSQL = d.render(insertOldSQL)
	d.fetchSQL = d.render(fetchSQL)
	d.ackSQL = d.render(ackSQL)
	d.releaseSQL = d.render(releaseSQL)
	d.renewSQL = d.render(renewSQL)
	d.renewBatchSQL = d.render(renewBatchSQL)
	d.ackBatchSQL = d.render(ackBatchSQL)
	return d, nil
}

// driverOf returns the PostGIS driver under s, or nil.
func driverOf(s *broker.Store) *driver {
	if s == nil {
		return nil
	}
	d, _ := s.Driver().(*driver)
	return d
}

// Table returns the quoted, schema-qualified name of the table a store
// made by [New] or opened by URL keeps its records in —
// "geodlq"."dead_letters" by default — for your own SQL on the pool
// [broker.Store.As] gives; "" for any other store.
func Table(s *broker.Store) string {
	if d := driverOf(s); d != nil {
		return d.table
	}
	return ""
}

// As implements [broker.Aser]: a **pgxpool.Pool target is set to the
// store's pool.
func (d *driver) As(target any) bool {
	if p, ok := target.(**pgxpool.Pool); ok {
		*p = d.pool
		return true
	}
	return false
}

// MaxMessageBytes implements [broker.Limiter]: the same limit for every
// destination.
func (d *driver) MaxMessageBytes(string) int { return d.limit }

// Close closes the pool when the URL opener made it; a pool given to
// [New] stays open.
func (d *driver) Close() error {
	if d.ownsPool {
		d.pool.Close()
	}
	return nil
}

// writeResult reports what a write did.
type writeResult struct {
	// id is the row id: the new row, or the existing row a duplicate
	// matched.
	id int64
	// duplicate is true when a record with the same idempotency key was
	// already pending or leased in the destination, so nothing was
	// inserted.
	duplicate bool
	// geomStatus is the row's geom_status.
	geomStatus string
	// geomError is PostGIS's message when geomStatus is geomUnparseable.
	geomError string
}

// Publish writes m as one row in one autocommitted INSERT (a duplicate of
// a pending or leased record is absorbed: see the package doc). The
// portable store calls it with a context that the caller's cancellation
// does not reach, so once the INSERT is sent its outcome is read back: a
// commit is never reported as a failure.
func (d *driver) Publish(ctx context.Context, destination string, m *broker.Message) error {
	_, err := d.write(ctx, destination, m)
	return err
}

// write inserts m and reports what the INSERT did.
func (d *driver) write(ctx context.Context, destination string, m *broker.Message) (writeResult, error) {
	r, err := d.prepare(destination, m)
	if err != nil {
		return writeResult{}, err
	}
	var res writeResult
	var inserted bool
	q, args := d.insertSQL, r.args()
	if !d.current(ctx) {
		q, args = d.insertOldSQL, args[:len(args)-len(r.ix.args())]
	}
	// A statement the server rolled back to resolve a conflict (a
	// deadlock or serialization failure between concurrent upserts of one
	// key) is run again.
	if err := txretry.Do(ctx, txretry.KindOf, func(ctx context.Context, _ txretry.Attempt) error {
		return d.pool.QueryRow(ctx, q, args...).Scan(&res.id, &inserted, &res.geomStatus, &res.geomError)
	}, nil); err != nil {
		return writeResult{}, fmt.Errorf("postgis: publish to %q: %w", destination, err)
	}
	res.duplicate = !inserted
	d.wrote(ctx, 1)
	switch {
	case res.duplicate:
		d.log.DebugContext(ctx, "geodlq: duplicate dead-letter write absorbed",
			slog.String("destination", destination), slog.Int64("id", res.id), slog.String("idempotency_key", deref(r.idemKey)))
	case res.geomStatus == geomUnparseable:
		d.log.DebugContext(ctx, "geodlq: PostGIS cannot parse the geometry; stored without it",
			slog.String("destination", destination), slog.Int64("id", res.id), slog.String("event_id", deref(r.eventID)),
			slog.String("error", res.geomError))
	}
	return res, nil
}

// PublishBatch implements [broker.Batcher]: the messages' INSERTs (the
// same statement Publish runs, duplicates absorbed the same way) sent as
// one pipeline in one transaction: one round trip and one commit for the
// batch. Nil when the transaction committed; otherwise nothing was written
// (an error from the COMMIT itself leaves the outcome to the server: the
// portable store reports it so).
func (d *driver) PublishBatch(ctx context.Context, destination string, ms []*broker.Message) error {
	if len(ms) == 0 {
		return nil
	}
	q := d.insertSQL
	old := !d.current(ctx)
	if old {
		q = d.insertOldSQL
	}
	b := &pgx.Batch{}
	for _, m := range ms {
		r, err := d.prepare(destination, m)
		if err != nil {
			return err
		}
		args := r.args()
		if old {
			args = args[:len(args)-len(r.ix.args())]
		}
		b.Queue(q, args...)
	}
	err := txretry.Do(ctx, txretry.KindOf, func(ctx context.Context, _ txretry.Attempt) error {
		return pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
			return tx.SendBatch(ctx, b).Close()
		})
	}, nil)
	if err != nil {
		return fmt.Errorf("postgis: publish %d messages to %q: %w", len(ms), destination, err)
	}
	d.wrote(ctx, len(ms))
	return nil
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
	ix            indexCols
}

// indexCols are the columns of broker.IndexOf (schema version 3).
type indexCols struct {
	vertices, attempts     int32
	geomBytes, nanos       int64
	source                 *string
	summary, attrs, search string
}

func (c *indexCols) args() []any {
	return []any{c.vertices, c.geomBytes, c.attempts, c.nanos, c.source, c.summary, c.attrs, c.search}
}

// indexOf computes m's index columns; env is m's envelope when decoded
// (nil: decoded here, if it is one).
func indexOf(m *broker.Message, env *envelope.Envelope) indexCols {
	var x broker.Indexed
	if env == nil {
		x = broker.IndexOf(m)
	} else {
		x = broker.IndexOfEnvelope(env, int64(len(m.Body)), m.Headers)
	}
	sum, _ := json.Marshal(x.Summary) // a Summary always encodes
	c := indexCols{vertices: int32(min(x.Summary.VertexCount, math.MaxInt32)), attempts: int32(min(x.Summary.Attempts, math.MaxInt32)),
		geomBytes: x.Summary.GeometryBytes, nanos: broker.SortValue(&x.Summary, broker.SortDeadLetteredAt),
		summary: string(sum), attrs: x.Attrs, search: x.Search}
	if x.Summary.Envelope {
		if src := broker.SourceValue(x.Attrs, broker.DefaultSourcePointer); src != "" {
			c.source = &src
		}
	}
	return c
}

func (r *row) args() []any {
	return append([]any{
		r.destination, r.key, r.headers, r.binaryHeaders, r.body, r.isEnvelope, r.envelopeText,
		r.eventID, r.idemKey, r.class, r.stage, r.epsg, r.kind, r.reason, r.topic, r.deadAt, r.deadNs,
		r.geojson, r.geomStatus, r.offloadURI, r.locX, r.locY, r.srid,
	}, r.ix.args()...)
}

// insertSQL writes a row with its index columns (schema version 3);
// insertOldSQL without them, into a table of an older version.
const (
	insertSQL = `
INSERT INTO {t} AS d (destination, msg_key, headers, binary_headers, body, is_envelope, envelope,
	event_id, idempotency_key, failure_class, failed_stage, epsg, reason_kind, reason, source_topic,
	dead_lettered_at, dead_lettered_ns, geom, geom_status, geom_error, offload_uri, location,
	vertex_count, geometry_bytes, attempts, dead_lettered_nanos, source, summary, attrs, search)
SELECT $1::text, $2::bytea, $3::text::jsonb, $4::text::jsonb, $5::bytea, $6::boolean, {s}.{n}_to_jsonb($7::text),
	$8::text, $9::text, $10::text, $11::text, $12::bigint, $13::text, $14::text, $15::text,
	$16::timestamptz, $17::smallint,
	g.geom,
	CASE WHEN $18::text IS NULL THEN $19::text WHEN g.geom IS NULL THEN 'unparseable' ELSE 'parsed' END,
	g.err, $20::text,
	CASE WHEN $21::float8 IS NULL OR $22::float8 IS NULL THEN NULL ELSE ST_SetSRID(ST_MakePoint($21, $22), $23) END,
	$24::integer, $25::bigint, $26::integer, $27::bigint, $28::text, $29::text, $30::text, $31::text
FROM {s}.{n}_parse_geojson($18::text, $23::integer) AS g
ON CONFLICT (destination, idempotency_key) WHERE replayed_at IS NULL
DO UPDATE SET duplicates = d.duplicates + 1, last_duplicate_at = now(),
	redead_lettered = d.redead_lettered OR d.status = 'leased'
RETURNING id, (xmax = 0), geom_status, COALESCE(geom_error, '')`
	insertOldSQL = `
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
)

// maxSRID is PostGIS's SRID_USER_MAXIMUM; larger EPSG codes are stored
// with SRID 0 (their code stays in the epsg column).
const maxSRID = 998999

// prepare turns m into the INSERT's parameters. The portable store has
// checked the destination (valid UTF-8, no control characters, so no NUL)
// and the body size.
func (d *driver) prepare(destination string, m *broker.Message) (*row, error) {
	r := &row{destination: destination, key: m.Key, body: m.Body, geomStatus: geomNone}
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
		r.ix = indexOf(&broker.Message{Body: m.Body, Headers: m.Headers}, nil)
		return r, nil
	}
	r.ix = indexOf(m, env)
	r.isEnvelope = true
	if utf8.Valid(m.Body) && !slices.Contains(m.Body, 0) {
		r.envelopeText = ptr(string(m.Body))
	}
	r.eventID = ptr(keyText(env.EventID))
	r.idemKey = ptr(keyText(env.IdempotencyKey))
	r.class = ptr(lossyText(string(env.FailureClass)))
	r.stage = ptr(lossyText(string(env.FailedStage)))
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
		r.geomStatus, r.offloadURI = geomOffloaded, ptr(lossyText(g.OffloadURI))
	case g.Missing:
		r.geomStatus = geomMissing
	case !utf8.Valid(g.Inline) || slices.Contains(g.Inline, 0):
		r.geomStatus = geomNotText
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

// Fetch leases up to n pending records of destination that match f,
// oldest (lowest id) first, in one statement: a SELECT … FOR UPDATE SKIP
// LOCKED picks rows no other transaction holds, and the same statement's
// UPDATE marks them leased until now() + LeaseTTL on the database's clock,
// so concurrent fetchers never take the same row. Records whose lease
// expired are pending again.
func (d *driver) Fetch(ctx context.Context, destination string, f broker.Filter, n int) ([]*broker.Record, error) {
	a := &sqlArgs{list: []any{destination, n, max(d.ttl.Microseconds(), 1)}}
	q := strings.Replace(d.fetchSQL, "{filter}", where(f, a, d.current(ctx)), 1)
	var out []*broker.Record
	// The lease starts on the database's clock after this moment.
	expires := time.Now().Add(d.ttl)
	// A statement the server rolled back to resolve a conflict is run
	// again; nothing was leased.
	err := txretry.Do(ctx, txretry.KindOf, func(ctx context.Context, _ txretry.Attempt) error {
		var err error
		out, err = d.fetch(ctx, destination, q, a.list)
		return err
	}, nil)
	if err != nil {
		return nil, err
	}
	for _, r := range out {
		r.LeaseExpires = expires
	}
	// RETURNING order is unspecified; restore id order.
	slices.SortFunc(out, func(a, b *broker.Record) int { return cmpID(a.ID, b.ID) })
	return out, nil
}

// fetch runs the leasing statement q once.
func (d *driver) fetch(ctx context.Context, destination, q string, args []any) ([]*broker.Record, error) {
	rows, err := d.pool.Query(ctx, q, args...)
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
	return out, nil
}

func cmpID(a, b string) int {
	x, _ := strconv.ParseInt(a, 10, 64)
	y, _ := strconv.ParseInt(b, 10, 64)
	return cmp.Compare(x, y)
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

// Ack marks r replayed (the row is kept until a purge). It succeeds while
// r's lease token is still the row's — even after lease_until passed, as
// long as no one fetched the row since — and otherwise fails with an
// error wrapping [broker.ErrLeaseLost]. If the event was dead-lettered
// again during the lease, the row goes back to pending and the error also
// wraps [ErrDeadLetteredAgain].
func (d *driver) Ack(ctx context.Context, r *broker.Record) error {
	st, err := d.settle(ctx, r, d.ackSQL)
	if err != nil {
		return err
	}
	d.wrote(ctx, 1)
	if st != string(broker.StatusReplayed) {
		return fmt.Errorf("postgis: record %s/%s: %w: %w", r.Destination, r.ID, broker.ErrLeaseLost, ErrDeadLetteredAgain)
	}
	return nil
}

const renewSQL = `
UPDATE {t} SET lease_until = now() + $4::bigint * interval '1 microsecond'
WHERE id = $1 AND destination = $2 AND lease_token = $3 AND status = 'leased'
RETURNING status`

// Renew sets r's lease_until to LeaseTTL from now on the database's
// clock, in one statement whose WHERE holds r's lease token: it succeeds
// while the token is still the row's — after lease_until too, as long as
// no one fetched the row since — and otherwise fails with an error
// wrapping [broker.ErrLeaseLost].
func (d *driver) Renew(ctx context.Context, r *broker.Record) error {
	expires := time.Now().Add(d.ttl)
	if _, err := d.settle(ctx, r, d.renewSQL, max(d.ttl.Microseconds(), 1)); err != nil {
		return err
	}
	r.LeaseExpires = expires
	return nil
}

// Release makes r pending again at once. It fails with an error wrapping
// [broker.ErrLeaseLost] when r's lease was lost.
func (d *driver) Release(ctx context.Context, r *broker.Record) error {
	_, err := d.settle(ctx, r, d.releaseSQL)
	return err
}

func (d *driver) settle(ctx context.Context, r *broker.Record, q string, more ...any) (string, error) {
	id, err := strconv.ParseInt(r.ID, 10, 64)
	if err != nil || r.Lease == "" {
		return "", fmt.Errorf("postgis: record %s/%s was not leased from this store: %w", r.Destination, r.ID, broker.ErrLeaseLost)
	}
	var st string
	args := append([]any{id, r.Destination, r.Lease}, more...)
	err = txretry.Do(ctx, txretry.KindOf, func(ctx context.Context, _ txretry.Attempt) error {
		return d.pool.QueryRow(ctx, q, args...).Scan(&st)
	}, nil)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("postgis: record %s/%s: %w", r.Destination, r.ID, broker.ErrLeaseLost)
	}
	if err != nil {
		return "", fmt.Errorf("postgis: record %s/%s: %w", r.Destination, r.ID, err)
	}
	return st, nil
}
