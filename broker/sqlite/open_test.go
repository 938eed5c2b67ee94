package sqlite_test

import (
	"context"
	"database/sql"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/broker/sqlite"
)

// listing returns the names in dir with their sizes and modification
// times, to show that an open changed nothing.
func listing(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, e := range es {
		fi, err := e.Info()
		require.NoError(t, err)
		out = append(out, e.Name()+" "+fi.Mode().String()+" "+fi.ModTime().String()+" "+strings.Repeat("#", int(min(fi.Size(), 64))))
	}
	return out
}

// newStore makes a store file holding one record and closes it.
func newStore(t *testing.T, path string) {
	t.Helper()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, path, nil)
	require.NoError(t, err)
	require.NoError(t, s.Publish(ctx, "d", brokertest.Message(t, brokertest.SampleInputs()[0])))
	require.NoError(t, s.Close())
}

// sqliteWithout makes a SQLite database (WAL, like a store) with another
// table.
func sqliteWithout(t *testing.T, path string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)")
	require.NoError(t, err)
	_, err = db.Exec(`CREATE TABLE other (a)`)
	require.NoError(t, err)
	require.NoError(t, db.Close())
}

// TestOpenTargets opens every kind of target with every mode: what is not
// a store is refused with broker.ErrNoStore and left exactly as it was, a
// read-only open writes nothing, and nothing waits (a FIFO included).
func TestOpenTargets(t *testing.T) {
	t.Parallel()
	type mode struct {
		name string
		opts broker.OpenOptions
	}
	modes := []mode{
		{"read-only", broker.OpenOptions{ReadOnly: true}},
		{"read-write", broker.OpenOptions{}},
		{"create", broker.OpenOptions{Create: true}},
		{"read-only+create", broker.OpenOptions{ReadOnly: true, Create: true}},
	}
	tests := []struct {
		name string
		// make prepares the target in dir and returns its path.
		make func(t *testing.T, dir string) string
		// works lists the modes that open a store; the others must fail
		// with ErrNoStore.
		works []string
		// changes lists the modes allowed to change the directory.
		changes []string
	}{
		{name: "missing file", make: func(_ *testing.T, dir string) string { return filepath.Join(dir, "missing.db") },
			works: []string{"create"}, changes: []string{"create"}},
		{name: "empty file", make: func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "empty.db")
			require.NoError(t, os.WriteFile(p, nil, 0o600))
			return p
		}, works: []string{"create"}, changes: []string{"create"}},
		{name: "not a SQLite file", make: func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "notes.txt")
			require.NoError(t, os.WriteFile(p, []byte(strings.Repeat("not a database\n", 50)), 0o600))
			return p
		}},
		{name: "SQLite file with a corrupt header", make: func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "short.db")
			require.NoError(t, os.WriteFile(p, []byte("SQLite format 3\x00\xff"), 0o600))
			return p
		}},
		{name: "SQLite file without the store's table", make: func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "other.db")
			sqliteWithout(t, p)
			return p
		}, works: []string{"create"}, changes: []string{"create"}},
		{name: "a table of the store's name that is not the store's", make: func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "impostor.db")
			db, err := sql.Open("sqlite", "file:"+p)
			require.NoError(t, err)
			_, err = db.Exec(`CREATE TABLE dlq_records (id INTEGER PRIMARY KEY, body BLOB)`)
			require.NoError(t, err)
			require.NoError(t, db.Close())
			return p
		}},
		{name: "directory", make: func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "sub")
			require.NoError(t, os.Mkdir(p, 0o700))
			return p
		}},
		{name: "valid store", make: func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "dlq.db")
			newStore(t, p)
			return p
		}, works: []string{"read-only", "read-write", "create", "read-only+create"}, changes: []string{"read-write", "create"}},
	}
	if fifo := mkfifo(t); fifo != nil {
		tests = append(tests, struct {
			name    string
			make    func(t *testing.T, dir string) string
			works   []string
			changes []string
		}{name: "FIFO", make: fifo})
	}
	for _, tt := range tests {
		for _, m := range modes {
			t.Run(tt.name+"/"+m.name, func(t *testing.T) {
				dir := t.TempDir()
				path := tt.make(t, dir)
				before := listing(t, dir)
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				opts := m.opts
				opts.ConnectTimeout = 5 * time.Second
				start := time.Now()
				s, err := broker.OpenStore(ctx, "sqlite://"+path, &opts)
				require.Less(t, time.Since(start), 5*time.Second, "opening does not wait")
				if slices.Contains(tt.works, m.name) {
					require.NoError(t, err)
					p, err := s.List(ctx, broker.ListOptions{IncludeReplayed: true})
					require.NoError(t, err)
					if tt.name == "valid store" {
						require.Len(t, p.Entries, 1)
					}
					require.NoError(t, s.Close())
				} else {
					require.ErrorIs(t, err, broker.ErrNoStore)
					require.Contains(t, err.Error(), "no geodlq store here")
					require.Nil(t, s)
				}
				if !slices.Contains(tt.changes, m.name) {
					require.Equal(t, before, listing(t, dir), "the directory is unchanged")
				}
			})
		}
	}
}

// TestOpenDevNull: /dev/null is not a store, read-only or not, and is not
// touched.
func TestOpenDevNull(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/dev/null"); err != nil {
		t.Skip("no /dev/null on this system")
	}
	for _, o := range []broker.OpenOptions{{ReadOnly: true}, {}, {Create: true}} {
		_, err := broker.OpenStore(context.Background(), "sqlite:///dev/null", &o)
		require.ErrorIs(t, err, broker.ErrNoStore)
		require.ErrorContains(t, err, "not a regular file")
		_, err = sqlite.Open(context.Background(), "/dev/null", &sqlite.Options{StoreOptions: broker.StoreOptions{ReadOnly: o.ReadOnly}})
		require.ErrorIs(t, err, broker.ErrNoStore)
	}
	for _, f := range []string{"/dev/null-journal", "/dev/null-wal", "/dev/null-shm"} {
		_, err := os.Lstat(f)
		require.ErrorIs(t, err, fs.ErrNotExist, "%s was not created", f)
	}
}

// TestReadOnly: a read-only handle reads, refuses writes, leaves nothing
// behind, and sees what another handle writes meanwhile, whether that
// handle is still open (the -wal file exists) or closed again.
func TestReadOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "dlq.db")
	newStore(t, path)
	before := listing(t, dir)

	ro, err := sqlite.Open(ctx, path, &sqlite.Options{StoreOptions: broker.StoreOptions{ReadOnly: true}})
	require.NoError(t, err)
	count := func() int {
		t.Helper()
		p, err := ro.List(ctx, broker.ListOptions{IncludeReplayed: true})
		require.NoError(t, err)
		return len(p.Entries)
	}
	require.Equal(t, 1, count())
	msg := brokertest.Message(t, brokertest.SampleInputs()[1])
	checks := map[string]error{"Publish": ro.Publish(ctx, "d", msg)}
	_, checks["Fetch"] = ro.Fetch(ctx, "d", broker.Filter{}, 1)
	_, checks["Purge"] = ro.Purge(ctx, broker.PurgeRequest{Filter: broker.Filter{Until: time.Now()}, IncludePending: true})
	for op, err := range checks {
		require.ErrorIs(t, err, broker.ErrReadOnly, op)
	}
	_, err = sqlite.NewConsumer(ro, "d", nil, nil)
	require.ErrorIs(t, err, broker.ErrReadOnly)
	var db *sql.DB
	require.True(t, ro.As(&db))
	_, err = db.Exec(`DELETE FROM dlq_records`)
	require.Error(t, err, "the handle's own database refuses writes")
	require.Equal(t, before, listing(t, dir), "reading created nothing")

	// A writer that comes and goes while the read-only handle is open.
	w, err := sqlite.Open(ctx, path, nil)
	require.NoError(t, err)
	require.NoError(t, w.Publish(ctx, "d", msg))
	require.Equal(t, 2, count(), "a write by a handle still open is seen")
	require.NoError(t, w.Close())
	require.NoError(t, ro.Close())
	w, err = sqlite.Open(ctx, path, nil)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	before = listing(t, dir)

	ro, err = sqlite.Open(ctx, path, &sqlite.Options{StoreOptions: broker.StoreOptions{ReadOnly: true}})
	require.NoError(t, err)
	require.Equal(t, 2, count())
	for i := range 3 {
		w, err := sqlite.Open(ctx, path, nil)
		require.NoError(t, err)
		require.NoError(t, w.Publish(ctx, "d", msg))
		require.NoError(t, w.Close())
		require.Equal(t, 3+i, count(), "a write by a handle since closed is seen")
	}
	require.NoError(t, ro.Close())
	require.Len(t, listing(t, dir), len(before), "no file left beside the database")
}

// TestOpenURL: the URL's parameters reach the store, and bad ones are
// refused.
func TestOpenURL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "u.db")
	s, err := broker.OpenStore(ctx, "sqlite://"+path+"?lease_ttl=1h&max_message_bytes=1000&busy_timeout=2s&synchronous=normal",
		&broker.OpenOptions{Create: true})
	require.NoError(t, err)
	require.Equal(t, 1000, s.MaxMessageBytes("d"))
	require.Equal(t, "sqlite", s.Name())
	require.NoError(t, s.Publish(ctx, "d", &broker.Message{Body: []byte("x")}))
	recs, err := s.Fetch(ctx, "d", broker.Filter{}, 1)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	p, err := s.List(ctx, broker.ListOptions{})
	require.NoError(t, err)
	require.Equal(t, broker.StatusLeased, p.Entries[0].Status, "leased for lease_ttl")
	require.NoError(t, s.Close())

	wd, err := os.Getwd()
	require.NoError(t, err)
	rel, err := filepath.Rel(wd, path)
	require.NoError(t, err)
	s, err = broker.OpenStore(ctx, "sqlite://"+rel, nil)
	require.NoError(t, err, "a relative path")
	require.NoError(t, s.Close())

	for _, bad := range []string{"sqlite://", "sqlite://" + path + "?lease_ttl=soon", "sqlite://" + path + "?lease_ttl=-1s",
		"sqlite://" + path + "?max_message_bytes=0", "sqlite://" + path + "?synchronous=OFF", "sqlite://" + path + "?cache=shared",
		"sqlite://" + path + "?%zz"} {
		_, err := broker.OpenStore(ctx, bad, &broker.OpenOptions{Create: true})
		require.ErrorIs(t, err, broker.ErrInvalidArgument, bad)
	}
	_, err = broker.OpenStore(ctx, "sqlite://"+filepath.Join(dir, "missing.db"), nil)
	require.ErrorIs(t, err, broker.ErrNoStore)
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.ErrorContains(t, err, "no such file", "the operator sees which file")
	require.NoFileExists(t, filepath.Join(dir, "missing.db"))
}

// TestOpenLimit: the size limit is capped at what a SQLite row holds.
func TestOpenLimit(t *testing.T) {
	t.Parallel()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "l.db"),
		&sqlite.Options{StoreOptions: broker.StoreOptions{MaxMessageBytes: 2 << 30}})
	require.NoError(t, err)
	defer s.Close()
	require.Equal(t, 999<<20, s.MaxMessageBytes("d"))
	_, err = sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "l.db"), &sqlite.Options{Synchronous: "OFF"})
	require.ErrorIs(t, err, broker.ErrInvalidArgument)
	_, err = sqlite.Open(context.Background(), "", nil)
	require.ErrorIs(t, err, broker.ErrInvalidArgument)
}
