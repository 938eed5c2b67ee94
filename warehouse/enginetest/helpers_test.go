package enginetest

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/duckdb/duckdb-go/v2"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	_ "github.com/geodlq/geodlq/broker/postgis"
	_ "github.com/geodlq/geodlq/broker/sqlite"
	"github.com/geodlq/geodlq/internal/testenv"
	"github.com/geodlq/geodlq/warehouse/enginetest/internal/pgtest"
	"github.com/geodlq/geodlq/warehouse/internal/fixture"
)

const dest = "vector-dlq"

// repoRoot is the repository's root directory.
func repoRoot(tb testing.TB) string {
	tb.Helper()
	_, file, _, ok := runtime.Caller(0)
	require.True(tb, ok)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// binDir holds the geodlq command the tests build; TestMain removes it.
var binDir string

func TestMain(m *testing.M) {
	var err error
	if binDir, err = os.MkdirTemp("", "geodlq-cli-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	code := m.Run()
	_ = os.RemoveAll(binDir)
	os.Exit(code)
}

// cli builds the geodlq command once per test binary.
var cli = sync.OnceValues(func() (string, error) {
	bin := filepath.Join(binDir, "geodlq")
	_, file, _, _ := runtime.Caller(0)
	cmd := exec.Command("go", "build", "-o", bin, "github.com/geodlq/geodlq/cmd/geodlq")
	cmd.Dir = filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building geodlq: %v\n%s", err, out)
	}
	return bin, nil
})

// geodlq runs the command and returns its standard output; it fails the
// test on a non-zero exit.
func geodlq(tb testing.TB, args ...string) []byte {
	tb.Helper()
	bin, err := cli()
	require.NoError(tb, err)
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(os.Environ(), "GEODLQ_STORE=", "GEODLQ_BLOBS=")
	require.NoError(tb, cmd.Run(), "geodlq %s\n%s", strings.Join(args, " "), stderr.String())
	return stdout.Bytes()
}

// backend is a store the tests run against: the URL the command opens it
// with, and how the test fills it.
type backend struct {
	name string
	open func(tb testing.TB) (readURL, writeURL string)
}

var backends = []backend{
	{"sqlite", func(tb testing.TB) (string, string) {
		p := filepath.Join(tb.TempDir(), "dlq.db")
		return "sqlite://" + p, "sqlite://" + p + "?synchronous=NORMAL"
	}},
	{"postgis", func(tb testing.TB) (string, string) {
		u, err := url.Parse(testenv.Postgres(tb))
		require.NoError(tb, err)
		q := u.Query()
		q.Set("geodlq_schema", pgtest.Schema(tb))
		u.RawQuery = q.Encode()
		return u.String(), u.String()
	}},
}

// openStore opens a store URL, creating it when create is set.
func openStore(tb testing.TB, raw string, create bool) *broker.Store {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := broker.OpenStore(ctx, raw, &broker.OpenOptions{Create: create, ReadOnly: !create})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

// fill publishes n fixture envelopes numbered from, with up to 8 writers,
// fixture.Step apart.
func fill(tb testing.TB, s *broker.Store, from, n int) { fillStep(tb, s, from, n, 0) }

// fillStep is fill with events step apart.
func fillStep(tb testing.TB, s *broker.Store, from, n int, step time.Duration) {
	tb.Helper()
	ctx := context.Background()
	const writers = 8
	var wg sync.WaitGroup
	errs := make([]error, writers)
	per := (n + writers - 1) / writers
	for w := 0; w < writers; w++ {
		lo := from + w*per
		hi := min(lo+per, from+n)
		if lo >= hi {
			continue
		}
		wg.Go(func() { errs[w] = fixture.Fill(ctx, s, dest, hi-lo, &fixture.Options{From: lo, Step: step}) })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(tb, err)
	}
}

// countEnvelopes counts the store's records that are envelopes, replayed
// ones included, by listing them.
func countEnvelopes(tb testing.TB, s *broker.Store) int {
	tb.Helper()
	n := 0
	err := s.ScanAll(context.Background(), broker.ListOptions{IncludeReplayed: true, Limit: broker.MaxListLimit}, func(e broker.Entry) error {
		if _, err := broker.EnvelopeOf(e.Record.Message); err == nil {
			n++
		}
		return nil
	})
	require.NoError(tb, err)
	return n
}

// duck opens an in-memory DuckDB.
func duck(tb testing.TB) *sql.DB {
	tb.Helper()
	db, err := sql.Open("duckdb", "")
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = db.Close() })
	return db
}

// glob is the dataset's data files as a DuckDB glob.
func glob(dir string) string { return filepath.ToSlash(dir) + "/**/*.parquet" }

// scan reads DuckDB's answer to q as rows of strings.
func scan(tb testing.TB, db *sql.DB, q string, args ...any) [][]string {
	tb.Helper()
	rows, err := db.Query(q, args...)
	require.NoError(tb, err, q)
	defer rows.Close()
	cols, err := rows.Columns()
	require.NoError(tb, err)
	var out [][]string
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		require.NoError(tb, rows.Scan(ptrs...))
		row := make([]string, len(cols))
		for i, v := range vals {
			row[i] = v.String
			if !v.Valid {
				row[i] = "NULL"
			}
		}
		out = append(out, row)
	}
	require.NoError(tb, rows.Err())
	return out
}

// counts turns two-column rows (key, count) into a map.
func counts(tb testing.TB, rows [][]string) map[string]int {
	tb.Helper()
	m := map[string]int{}
	for _, r := range rows {
		var n int
		_, err := fmt.Sscan(r[1], &n)
		require.NoError(tb, err)
		m[r[0]] = n
	}
	return m
}

// geoSchema compiles the GeoParquet 1.1 schema, with PROJ's PROJJSON
// schema for its crs member.
var geoSchema = sync.OnceValues(func() (*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	_, file, _, _ := runtime.Caller(0)
	for id, path := range map[string]string{
		"https://geodlq.dev/testdata/geoparquet-1.1.0.schema.json": filepath.Join(filepath.Dir(file), "testdata", "geoparquet-1.1.0.schema.json"),
		// Debian's proj-data (a dependency of libproj-dev, which geodlq's
		// spatial package builds against) ships PROJ's PROJJSON schema.
		"https://proj.org/schemas/v0.5/projjson.schema.json": "/usr/share/proj/projjson.schema.json",
	} {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		doc, err := jsonschema.UnmarshalJSON(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if err := c.AddResource(id, doc); err != nil {
			return nil, err
		}
	}
	return c.Compile("https://geodlq.dev/testdata/geoparquet-1.1.0.schema.json")
})

// geoMeta is the part of the geo metadata the tests check beyond the
// schema.
type geoMeta struct {
	Version       string `json:"version"`
	PrimaryColumn string `json:"primary_column"`
	Columns       map[string]struct {
		Encoding      string          `json:"encoding"`
		GeometryTypes []string        `json:"geometry_types"`
		CRS           json.RawMessage `json:"crs"`
		BBox          []float64       `json:"bbox"`
		Covering      *struct {
			BBox map[string][]string `json:"bbox"`
		} `json:"covering"`
	} `json:"columns"`
}

// wkbTypes maps WKB type codes (ISO and OGC 2D) to GeoParquet type names.
var wkbTypes = map[uint32]string{1: "Point", 2: "LineString", 3: "Polygon", 4: "MultiPoint", 5: "MultiLineString", 6: "MultiPolygon", 7: "GeometryCollection"}

// decodeWKB reads a 2D Point or Polygon WKB value whole and returns its
// type name and coordinates; anything else, or trailing bytes, fails.
func decodeWKB(b []byte) (string, [][2]float64, error) {
	if len(b) < 5 {
		return "", nil, fmt.Errorf("%d bytes", len(b))
	}
	var bo binary.ByteOrder = binary.LittleEndian
	switch b[0] {
	case 0:
		bo = binary.BigEndian
	case 1:
	default:
		return "", nil, fmt.Errorf("byte order %d", b[0])
	}
	typ := bo.Uint32(b[1:5])
	rest := b[5:]
	read := func() (float64, error) {
		if len(rest) < 8 {
			return 0, fmt.Errorf("short coordinate")
		}
		f := math.Float64frombits(bo.Uint64(rest))
		rest = rest[8:]
		return f, nil
	}
	var pts [][2]float64
	point := func() error {
		x, err := read()
		if err != nil {
			return err
		}
		y, err := read()
		pts = append(pts, [2]float64{x, y})
		return err
	}
	switch typ {
	case 1:
		if err := point(); err != nil {
			return "", nil, err
		}
	case 3:
		if len(rest) < 4 {
			return "", nil, fmt.Errorf("short ring count")
		}
		rings := bo.Uint32(rest)
		rest = rest[4:]
		for range rings {
			if len(rest) < 4 {
				return "", nil, fmt.Errorf("short point count")
			}
			n := bo.Uint32(rest)
			rest = rest[4:]
			if uint64(n)*16 > uint64(len(rest)) {
				return "", nil, fmt.Errorf("ring of %d points in %d bytes", n, len(rest))
			}
			for range n {
				if err := point(); err != nil {
					return "", nil, err
				}
			}
		}
	default:
		return "", nil, fmt.Errorf("WKB type %d", typ)
	}
	if len(rest) != 0 {
		return "", nil, fmt.Errorf("%d trailing bytes", len(rest))
	}
	return wkbTypes[typ], pts, nil
}
