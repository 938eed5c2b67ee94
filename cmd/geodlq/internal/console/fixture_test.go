package console

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	_ "github.com/geodlq/geodlq/broker/postgis"
	_ "github.com/geodlq/geodlq/broker/sqlite"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/cmd/geodlq/internal/native"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/testenv"
	"github.com/geodlq/geodlq/offload"
	"github.com/geodlq/geodlq/spatial"
)

// The fixture: events a consumer of topic "parcels" dead-letters, each
// with a known place on the map (or a known reason it has none).
const (
	topic = "parcels"
	dlt   = "parcels.poison.dlt"
)

// hostileID is an event id (and property) an attacker controls.
const hostileID = `evt-<script>window.__xss=1</script><img src=x onerror="window.__xss=2">`

type fixtureEvent struct {
	id      string
	payload string
	// placed says whether the record has a place on the map.
	placed bool
}

func bowtieAt(x, y float64) string {
	return fmt.Sprintf(`{"type":"Polygon","coordinates":[[[%g,%g],[%g,%g],[%g,%g],[%g,%g],[%g,%g]]]}`,
		x, y, x+1, y+1, x+1, y, x, y+1, x, y)
}

func evjson(id, source, crs, geom string) string {
	return fmt.Sprintf(`{"event_id":%q,"source_uri":%q,"crs":%q,"geometry":%s}`, id, source, crs, geom)
}

// fixtureEvents returns the fixture. Europe holds four records (for the
// box filter): the bowtie at 10.5,10.5 is elsewhere.
func fixtureEvents() []fixtureEvent {
	return []fixtureEvent{
		{"evt-bowtie", evjson("evt-bowtie", "s3://provider-a/tiles/7.geojson", "EPSG:4326", bowtieAt(10, 10)), true},
		{"evt-bowtie-b", evjson("evt-bowtie-b", "s3://provider-b/parcels/1.geojson", "EPSG:4326", bowtieAt(-60, -20)), true},
		{"evt-eu-1", evjson("evt-eu-1", "s3://provider-b/eu/1.geojson", "EPSG:4326", bowtieAt(2, 48)), true},
		{"evt-eu-2", evjson("evt-eu-2", "s3://provider-b/eu/2.geojson", "EPSG:4326", bowtieAt(13, 52)), true},
		{"evt-eu-3", evjson("evt-eu-3", "s3://provider-b/eu/3.geojson", "EPSG:4326", bowtieAt(-4, 40)), true},
		{"evt-eu-unclosed", evjson("evt-eu-unclosed", "s3://provider-a/eu/4.geojson", "EPSG:4326",
			`{"type":"Polygon","coordinates":[[[9,45],[10,45],[10,46],[9,46]]]}`), true},
		{"evt-nan", evjson("evt-nan", "s3://provider-a/nan.geojson", "EPSG:4326",
			`{"type":"Polygon","coordinates":[[[100,0],[101,0],[NaN,1],[100,1],[100,0]]]}`), true},
		{"evt-3857", evjson("evt-3857", "s3://provider-c/mercator.geojson", "EPSG:3857",
			`{"type":"Polygon","coordinates":[[[-8238310,4970072],[-8237310,4970072],[-8237310,4971072],[-8238310,4971072],[-8238310,4970072]]]}`), true},
		{"evt-range", evjson("evt-range", "s3://provider-c/labelled-wrong.geojson", "EPSG:4326",
			`{"type":"Point","coordinates":[1113194.9,1118889.9]}`), false},
		{"evt-hostile", `{"event_id":` + jsonString(hostileID) + `,"source_uri":"s3://provider-x/<b>bold</b>","crs":"EPSG:4326",` +
			`"properties":{"name":"<img src=x onerror=\"window.__xss=3\">","note":"<script>window.__xss=4</script>"},"geometry":` + bowtieAt(-100, 40) + `}`, true},
		{"evt-not-json", `this is not JSON <script>window.__xss=5</script>`, false},
	}
}

func jsonString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func placedCount() int {
	n := 0
	for _, e := range fixtureEvents() {
		if e.placed {
			n++
		}
	}
	return n
}

// fill dead-letters payloads through the Processor, as a consumer of
// topic on Kafka would, one minute apart from start.
func fill(t testing.TB, s *broker.Store, off *offload.Offloader, start time.Time, payloads ...string) {
	t.Helper()
	fillFrom(t, s, off, start, "kafka", payloads...)
}

// fillFrom is fill, the messages coming from the broker named system.
func fillFrom(t testing.TB, s broker.Publisher, off *offload.Offloader, start time.Time, system string, payloads ...string) {
	t.Helper()
	checker, err := native.NewChecker(&spatial.Options{MaxVertices: fixtureMaxVertices})
	require.NoError(t, err)
	defer checker.Close()
	var tick atomic.Int64
	now := func() time.Time { return start.Add(time.Duration(tick.Load()) * time.Minute) }
	b, err := envelope.NewBuilder(&envelope.BuilderOptions{Offloader: off, ResolveEPSG: checker.ResolveEPSG, Now: now})
	require.NoError(t, err)
	proc, err := broker.NewProcessor(&broker.ProcessorOptions{Publisher: s, Builder: b, Now: now, Policy: classify.Policy{MaxAttempts: 1}})
	require.NoError(t, err)
	ctx := context.Background()
	for _, p := range payloads {
		msg := &broker.Message{Body: []byte(p), Source: &envelope.Source{System: system, Topic: topic}}
		res, err := proc.Process(ctx, msg, func(ctx context.Context, m *broker.Message) error {
			if err := simulated(m.Body); err != nil {
				return err
			}
			_, err := checker.CheckEventContext(ctx, m.Body)
			return err
		})
		require.NoError(t, err)
		require.False(t, res.Ack && res.Destination == "", "every fixture event fails its check: %s", p)
		tick.Add(1)
	}
}

// storeKind opens fresh stores of one adapter.
type storeKind struct {
	name string
	open func(t testing.TB) (url string)
}

func sqliteKind() storeKind {
	return storeKind{"sqlite", func(t testing.TB) string {
		return "sqlite://" + filepath.Join(t.TempDir(), "dlq.db")
	}}
}

func postgisKind() storeKind {
	return storeKind{"postgis", func(t testing.TB) string {
		dsn := testenv.Postgres(t)
		var rnd [6]byte
		_, _ = rand.Read(rnd[:])
		schema := "geodlq_console_" + hex.EncodeToString(rnd[:])
		t.Cleanup(func() {
			conn, err := pgx.Connect(context.Background(), dsn)
			if err == nil {
				_, _ = conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
				_ = conn.Close(context.Background())
			}
		})
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		return dsn + sep + "geodlq_schema=" + schema
	}}
}

func kinds() []storeKind { return []storeKind{sqliteKind(), postgisKind()} }

// env is a console over a filled store.
type env struct {
	t      testing.TB
	url    string
	store  *broker.Store
	target *broker.Store
	srv    *Server
	http   *httptest.Server
	token  string
	blobs  *offload.Offloader
}

type envOptions struct {
	readOnly bool
	events   []string
	poll     time.Duration
	// system is the broker the events came from; default "kafka".
	system string
	// sourcePointer is Options.SourcePointer.
	sourcePointer string
	// blobThreshold is the offloader's Threshold; default
	// offload.DefaultThreshold.
	blobThreshold int
	// logger is Options.Logger.
	logger *slog.Logger
	// maxMessageBytes is the largest dead letter the store takes when
	// filled (a broker's message size limit), so that larger payloads
	// are offloaded whole; 0 means no limit.
	maxMessageBytes int
	// timeouts is Options.Timeouts.
	timeouts Timeouts
}

// limitedPublisher is a store with a message size limit.
type limitedPublisher struct {
	*broker.Store
	limit int
}

// MaxMessageBytes implements broker.Limiter.
func (l limitedPublisher) MaxMessageBytes(string) int { return l.limit }

const testToken = "test-token-0123456789abcdef"

// newEnv creates a store of kind k, fills it with the fixture (or
// o.events) and serves a console over it; replays go to a separate
// SQLite target store.
func newEnv(t testing.TB, k storeKind, o envOptions) *env {
	t.Helper()
	ctx := context.Background()
	e := &env{t: t, url: k.open(t)}
	ws, err := broker.OpenStore(ctx, e.url, &broker.OpenOptions{Create: true})
	require.NoError(t, err)
	dir, err := offload.NewDirStore(filepath.Join(t.TempDir(), "blobs"))
	require.NoError(t, err)
	e.blobs, err = offload.New(dir, &offload.Options{Threshold: o.blobThreshold})
	require.NoError(t, err)
	payloads := o.events
	if payloads == nil {
		for _, fe := range fixtureEvents() {
			payloads = append(payloads, fe.payload)
		}
	}
	system := o.system
	if system == "" {
		system = "kafka"
	}
	var pub broker.Publisher = ws
	if o.maxMessageBytes > 0 {
		pub = limitedPublisher{ws, o.maxMessageBytes}
	}
	fillFrom(t, pub, e.blobs, time.Now().Add(-time.Duration(len(payloads))*time.Minute).UTC(), system, payloads...)
	require.NoError(t, ws.Close())

	e.store, err = broker.OpenStore(ctx, e.url, &broker.OpenOptions{ReadOnly: o.readOnly})
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.store.Close() })
	e.target, err = broker.OpenStore(ctx, "sqlite://"+filepath.Join(t.TempDir(), "target.db"), &broker.OpenOptions{Create: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.target.Close() })
	if !o.readOnly {
		e.token = testToken
	}
	poll := o.poll
	if poll == 0 {
		poll = 200 * time.Millisecond
	}
	e.srv, err = New(Options{Store: e.store, Targets: []Target{{Label: "sqlite://target.db", Publisher: e.target}}, Blobs: e.blobs, Token: e.token,
		Label: broker.Redact(e.url), Poll: poll, SourcePointer: o.sourcePointer, Logger: o.logger, Timeouts: o.timeouts})
	require.NoError(t, err)
	e.http = httptest.NewServer(e.srv)
	t.Cleanup(func() {
		e.http.Close()
		_ = e.srv.Close()
	})
	require.Eventually(t, e.srv.Ready, 60*time.Second, 20*time.Millisecond, "the map index is built")
	return e
}
