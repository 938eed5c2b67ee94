package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/internal/testenv"
)

// The tests of issue 12's operator features, run with the built binary
// against real stores: SQLite, PostGIS and Redis.

// bowties returns n bowtie events evt-bt-000…, as JSON lines.
func bowties(n int) []byte {
	var b bytes.Buffer
	for i := range n {
		fmt.Fprintf(&b, `{"event_id":"evt-bt-%03d","crs":"EPSG:4326","geometry":%s}`+"\n", i, bowtieGeom)
	}
	return b.Bytes()
}

func randomName(prefix string) string {
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	return prefix + hex.EncodeToString(rnd[:])
}

// fastDir is a directory on a RAM file system when the machine has one
// (/dev/shm), so that a test writing thousands of SQLite transactions is
// not bound by the disk's fsync; else t.TempDir().
func fastDir(t *testing.T) string {
	t.Helper()
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "geodlq-test-"); err == nil {
			t.Cleanup(func() { os.RemoveAll(d) })
			return d
		}
	}
	return t.TempDir()
}

// storeCLI returns a cli on a fresh, empty store of the kind ("sqlite",
// "postgis", "redis") and a blob directory.
func storeCLI(t *testing.T, kind string) cli {
	t.Helper()
	blobs := "file://" + filepath.Join(t.TempDir(), "blobs")
	switch kind {
	case "sqlite":
		return cli{t: t, store: "sqlite://" + filepath.Join(t.TempDir(), "dlq.db"), blobs: blobs}
	case "postgis":
		dsn := testenv.Postgres(t)
		schema := randomName("geodlq_cli_")
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
		return cli{t: t, store: dsn + sep + "geodlq_schema=" + schema, blobs: blobs}
	case "redis":
		addr := testenv.Redis(t)
		prefix := randomName("geodlq-cli-")
		t.Cleanup(func() {
			cl := redis.NewClient(&redis.Options{Addr: addr})
			defer cl.Close()
			keys, _ := cl.Keys(context.Background(), prefix+":*").Result()
			if len(keys) > 0 {
				cl.Del(context.Background(), keys...)
			}
		})
		return cli{t: t, store: "redis://" + addr + "/0?geodlq_prefix=" + prefix + "&lease_ttl=10s", blobs: blobs}
	}
	t.Fatalf("unknown store kind %q", kind)
	return cli{}
}

var storeKinds = []string{"sqlite", "postgis", "redis"}

// TestOneRecord proves replay ID and discard ID on every store: a record
// named by id, DEST/ID or event id is replayed once — its side effect, the
// re-injected event, happens exactly once however often the command runs —
// and discarded records are gone; --id and --event filter every command;
// an unknown id is a usage error.
func TestOneRecord(t *testing.T) {
	t.Parallel()
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			c := storeCLI(t, kind)
			c.must(exitProblems, bowties(4), "check", "--dead-letter", "parcels")
			dest := []string{"--dest", "parcels.poison.dlt"}
			views := listViews(t, c, dest...)
			require.Len(t, views, 4)
			byEvent := map[string]view{}
			for _, v := range views {
				byEvent[v.EventID] = v
			}
			reinjected := func() []view { return listViews(t, c, "--dest", "parcels") }

			// By record id: one re-injection; again: nothing more.
			first := byEvent["evt-bt-000"]
			rep := replayJSON(t, c, exitOK, append(dest, "--repair", "make-valid", "--target", c.store, first.ID)...)
			require.Equal(t, map[string]int{"repaired": 1}, rep.Counts)
			require.Equal(t, "evt-bt-000", rep.Destinations[0].Items[0].EventID)
			if kind == "redis" {
				// A stream keeps no acknowledged entry: the record is gone.
				r := c.must(exitUsage, nil, append(dest, "replay", "--repair", "make-valid", "--target", c.store, "-o", "json", first.ID)...)
				require.Contains(t, r.stderr, "no such record")
			} else {
				r := c.must(exitOK, nil, append(dest, "replay", "--repair", "make-valid", "--target", c.store, "-o", "json", first.ID)...)
				require.Contains(t, r.stderr, "was already replayed")
			}
			require.Len(t, reinjected(), 1, "the side effect ran exactly once")
			require.Equal(t, "parcels.poison.dlt/"+first.ID, reinjected()[0].Headers["dlq-replay-of"])

			// By DEST/ID and by event id.
			second := byEvent["evt-bt-001"]
			// Without --target: these records came from geodlq check, not
			// from the store's broker, so nothing is re-injected into the
			// dead-letter store and the error names --target.
			r := c.must(exitUsage, nil, "replay", "--repair", "make-valid", "parcels.poison.dlt/"+second.ID)
			require.Contains(t, r.stderr, `came from geodlq-check (1), not from this store's broker`)
			require.Contains(t, r.stderr, "--target URL")
			require.Len(t, reinjected(), 1, "refused: nothing re-injected")
			replayJSON(t, c, exitOK, "--repair", "make-valid", "--target", c.store, "parcels.poison.dlt/"+second.ID)
			replayJSON(t, c, exitOK, append(dest, "--repair", "make-valid", "--target", c.store, "evt-bt-002")...)
			got := map[string]int{}
			for _, v := range reinjected() {
				got[v.EventID]++
			}
			require.Equal(t, map[string]int{"evt-bt-000": 1, "evt-bt-001": 1, "evt-bt-002": 1}, got)

			// --event and --id as filters: list, stats, export.
			require.Equal(t, []string{"evt-bt-003"}, listIDs(t, c, append(dest, "--event", "evt-bt-003")...))
			if kind != "redis" {
				require.Equal(t, []string{"evt-bt-000"}, listIDs(t, c, append(dest, "--all", "--id", first.ID)...))
			}

			// Discard: asks first, deletes with --yes, and the record is gone.
			r = c.must(exitOK, []byte("n\n"), append(dest, "discard", "evt-bt-003")...)
			require.Contains(t, r.stderr, "aborted; nothing deleted")
			require.Equal(t, []string{"evt-bt-003"}, listIDs(t, c, dest...))
			// A name that matches nothing: a usage error, and nothing is
			// deleted, not even the records the other names match.
			r = c.must(exitUsage, nil, append(dest, "discard", "--yes", "evt-bt-003", "no-such-record")...)
			require.Contains(t, r.stderr, "no-such-record: no such record; nothing deleted")
			require.Equal(t, []string{"evt-bt-003"}, listIDs(t, c, dest...))
			var dr discardReport
			require.NoError(t, json.Unmarshal([]byte(c.must(exitOK, nil, append(dest, "discard", "--yes", "-o", "json", "evt-bt-003")...).stdout), &dr))
			require.Equal(t, []string{"parcels.poison.dlt/" + byEvent["evt-bt-003"].ID}, dr.Deleted)
			require.Empty(t, listIDs(t, c, dest...))
			r = c.must(exitUsage, nil, append(dest, "replay", "no-such-record")...)
			require.Contains(t, r.stderr, "no such record")
			c.must(exitUsage, nil, append(dest, "discard", "--yes", "no-such-record")...)
		})
	}
}

// TestValidateEveryFilter: a bad value of any filter fails every command
// that takes it, with the known values and a pointer to its help, and
// without touching the store.
func TestValidateEveryFilter(t *testing.T) {
	t.Parallel()
	c := storeCLI(t, "sqlite")
	c.must(exitProblems, bowties(1), "check", "--dead-letter", "parcels")
	for _, cmd := range []string{"list", "stats", "export", "replay", "triage", "verify"} {
		for _, bad := range [][]string{{"--reason", "bogus"}, {"--class", "bogus"}, {"--stage", "bogus"}, {"--bbox", "1,2"}, {"--since", "soon"}, {"--epsg", "x"}} {
			r := c.must(exitUsage, nil, append([]string{cmd}, bad...)...)
			require.Contains(t, r.stderr, bad[0], "%s %v", cmd, bad)
			require.Contains(t, r.stderr, "Run 'geodlq "+cmd+" --help' for usage.", "%s %v", cmd, bad)
		}
	}
	require.Equal(t, []string{"evt-bt-000"}, listIDs(t, c), "nothing changed")
}

// TestListPagesSortAndFollow: --limit pages with --after cover every
// record once; --sort orders; --follow prints records dead-lettered after
// it started, until Ctrl-C (exit 130).
func TestListPagesSortAndFollow(t *testing.T) {
	t.Parallel()
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			c := storeCLI(t, kind)
			c.must(exitProblems, bowties(7), "check", "--dead-letter", "parcels")
			var seen []string
			after := ""
			for pages := 0; ; pages++ {
				require.Less(t, pages, 10)
				args := []string{"list", "-o", "json", "--limit", "3"}
				if after != "" {
					args = append(args, "--after", after)
				}
				var p listPage
				require.NoError(t, json.Unmarshal([]byte(c.must(exitOK, nil, args...).stdout), &p))
				require.LessOrEqual(t, len(p.Items), 3)
				for _, v := range p.Items {
					seen = append(seen, v.EventID)
				}
				if p.Next == "" {
					break
				}
				after = p.Next
			}
			want := strings.Split(strings.TrimSpace(string(bytes.ReplaceAll(bowties(7), []byte("\n"), []byte(" ")))), " ")
			require.Len(t, seen, len(want))
			sorted := slices.Clone(seen)
			slices.Sort(sorted)
			require.Equal(t, seen, sorted, "oldest first")
			require.Len(t, slices.Compact(sorted), 7, "every record once")

			r := c.must(exitOK, nil, "list", "-o", "jsonl", "--sort", "-event")
			lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
			require.Len(t, lines, 7)
			var top view
			require.NoError(t, json.Unmarshal([]byte(lines[0]), &top))
			require.Equal(t, "evt-bt-006", top.EventID)

			r = c.must(exitOK, nil, "list", "--limit", "2")
			require.Contains(t, r.stderr, "more records: --after ")

			// --follow.
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, binary, append(c.base(), "list", "--follow", "-o", "jsonl", "--interval", "100ms")...)
			out, err := cmd.StdoutPipe()
			require.NoError(t, err)
			var errb bytes.Buffer
			cmd.Stderr = &errb
			require.NoError(t, cmd.Start())
			lineCh := make(chan string, 100)
			go func() {
				sc := bufio.NewScanner(out)
				sc.Buffer(nil, 1<<20)
				for sc.Scan() {
					lineCh <- sc.Text()
				}
				close(lineCh)
			}()
			for range 7 {
				<-lineCh // the records already there
			}
			c.must(exitProblems, []byte(`{"event_id":"evt-late","crs":"EPSG:4326","geometry":`+bowtieGeom+`}`), "check", "--dead-letter", "parcels")
			var late view
			select {
			case l := <-lineCh:
				require.NoError(t, json.Unmarshal([]byte(l), &late))
			case <-time.After(20 * time.Second):
				t.Fatalf("list --follow did not print the new record: %s", errb.String())
			}
			require.Equal(t, "evt-late", late.EventID)
			require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
			err = cmd.Wait()
			var ee *exec.ExitError
			require.True(t, errors.As(err, &ee), "%v", err)
			require.Equal(t, exitInterrupted, ee.ExitCode(), errb.String())
		})
	}
}

// progressLines parses the JSON progress records of stderr.
func progressLines(t *testing.T, stderr string) []progressRecord {
	t.Helper()
	var recs []progressRecord
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, `{"progress":`) {
			var r progressRecord
			require.NoError(t, json.Unmarshal([]byte(l), &r), l)
			recs = append(recs, r)
		}
	}
	return recs
}

// TestReplayProgressNotATerminal replays 2,000 records with stderr a
// pipe: progress records (done, total, rate, ETA) arrive on stderr while
// the replay runs — read as they come, before it ends — and the report is
// a count by outcome, without 2,000 rows. (2,000 rather than 10,000: the
// race-built binary repairs ~100 records/s on a quiet machine, and under
// the whole suite's load 10,000 outlived the deadline in CI.)
func TestReplayProgressNotATerminal(t *testing.T) {
	t.Parallel()
	const n = 2_000
	dir := fastDir(t)
	c := cli{t: t, store: "sqlite://" + filepath.Join(dir, "dlq.db")}
	var in bytes.Buffer
	for i := range n {
		fmt.Fprintf(&in, `{"event_id":"evt-%05d","crs":"EPSG:4326","geometry":%s}`+"\n", i, bowtieGeom)
	}
	seed := c
	seed.bin = binary // the seeding is not what this test watches
	seed.must(exitProblems, in.Bytes(), "check", "--dead-letter", "parcels", "-o", "json")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, raceBinary, append(c.base(), "replay", "--repair", "make-valid", "--progress-interval", "250ms",
		"--target", "sqlite://"+filepath.Join(dir, "target.db"))...)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	var out bytes.Buffer
	cmd.Stdout = &out
	require.NoError(t, cmd.Start())
	var before []progressRecord
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if cmd.ProcessState == nil && strings.HasPrefix(sc.Text(), `{"progress":`) {
			var r progressRecord
			require.NoError(t, json.Unmarshal(sc.Bytes(), &r))
			before = append(before, r)
		}
	}
	require.NoError(t, cmd.Wait(), out.String())
	require.GreaterOrEqual(t, len(before), 2, "progress records while the replay ran")
	for i, r := range before {
		require.Equal(t, "replay", r.Progress)
		require.NotNil(t, r.Total)
		require.Equal(t, int64(n), *r.Total)
		require.LessOrEqual(t, r.Done, int64(n))
		if i > 0 {
			require.GreaterOrEqual(t, r.Done, before[i-1].Done, "done never goes back")
		}
	}
	require.Less(t, before[0].Done, int64(n), "the first record came before the end")
	withETA := 0
	for _, r := range before {
		if r.Rate > 0 {
			require.NotNil(t, r.ETA, "a record with a rate has an ETA: %+v", r)
			withETA++
		}
	}
	require.Positive(t, withETA, "some record while the replay ran had a rate and an ETA")
	require.Contains(t, out.String(), fmt.Sprintf("replay: %d examined", n))
	require.Regexp(t, fmt.Sprintf(`repaired +%d `, n), out.String())
	require.Less(t, strings.Count(out.String(), "\n"), 10, "a summary, not a row per record")
}

// TestNoStoreHere: every store URL the command accepts, pointed at a
// server that holds no geodlq store there, says "no geodlq store here",
// and a reading command creates nothing; pointed at a server that accepts
// connections but never answers, it gives up within the connect timeout.
func TestNoStoreHere(t *testing.T) {
	t.Parallel()
	dsn := testenv.Postgres(t)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	empty := filepath.Join(t.TempDir(), "empty.db")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	text := filepath.Join(t.TempDir(), "notes.db")
	require.NoError(t, os.WriteFile(text, []byte("not a database\n"), 0o644))
	stores := map[string]string{
		"sqlite missing":   "sqlite://" + filepath.Join(t.TempDir(), "missing.db"),
		"sqlite empty":     "sqlite://" + empty,
		"sqlite text":      "sqlite://" + text,
		"sqlite /dev/null": "sqlite:///dev/null",
		"postgis":          dsn + sep + "geodlq_schema=" + randomName("nostore_"),
		"redis":            "redis://" + testenv.Redis(t) + "/0?geodlq_prefix=" + randomName("nostore-"),
		"mysql":            "mysql://root@127.0.0.1:3306/test?geodlq_table=" + randomName("nostore_"),
		"nats":             strings.TrimSuffix(testenv.NATS(t), "/") + "?geodlq_stream=" + randomName("NOSTORE_"),
		"amqp":             strings.TrimSuffix(testenv.AMQP(t), "/") + "/?geodlq_exchange=" + randomName("nostore-"),
	}
	for name, url := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := cli{t: t, store: url}
			for _, cmd := range [][]string{{"list"}, {"stats"}, {"export", "-"}} {
				r := c.must(exitStore, nil, cmd...)
				require.Contains(t, r.stderr, "no geodlq store here", "%s %v", name, cmd)
				require.NotContains(t, r.stderr, "panic")
			}
		})
	}
	fi, err := os.Stat(empty)
	require.NoError(t, err)
	require.Zero(t, fi.Size(), "the empty file is still empty")
	for _, f := range []string{empty + "-journal", empty + "-wal", empty + "-shm"} {
		require.NoFileExists(t, f)
	}

	// A server that accepts and then says nothing.
	silent := silentServer(t)
	for _, scheme := range []string{"postgres://postgres@%s/db", "redis://%s/0", "mysql://root@%s/db", "nats://%s", "amqp://guest:guest@%s/", "kafka://%s"} {
		url := fmt.Sprintf(scheme, silent)
		t.Run(strings.SplitN(scheme, ":", 2)[0]+" silent", func(t *testing.T) {
			t.Parallel()
			c := cli{t: t, store: url}
			start := time.Now()
			r := c.must(exitStore, nil, "--connect-timeout", "1s", "--dest", "parcels.poison.dlt", "list")
			require.Less(t, time.Since(start), 15*time.Second, "gave up within the connect timeout: %s", r.stderr)
			require.Equal(t, 1, strings.Count(strings.TrimSpace(r.stderr), "\n")+1, "one line: the command's error\n%s", r.stderr)
		})
	}
}

// silentServer listens on 127.0.0.1, accepts connections and never
// answers.
func silentServer(t *testing.T) string {
	t.Helper()
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, conn) }()
		}
	}()
	return ln.Addr().String()
}

// TestTriageDryRunSaysWouldQuarantine: a dry run reports the
// resource_exhausted records as would_quarantine (not "skipped"), moves
// nothing, and the real run then quarantines exactly those; replay
// --fail-if-none exits 1 once nothing is left to replay.
func TestTriageDryRunSaysWouldQuarantine(t *testing.T) {
	t.Parallel()
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			c := storeCLI(t, kind)
			in := bowties(2)
			for i := range 3 {
				in = append(in, fmt.Sprintf(`{"event_id":"evt-re-%d","crs":"EPSG:4326","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,0],[2,0],[2,1],[2,2],[1,2],[0,2],[0,1],[0,0]]]}}`+"\n", i)...)
			}
			c.must(exitProblems, in, "check", "--dead-letter", "parcels", "--max-vertices", "8")
			var dry triageReport
			require.NoError(t, json.Unmarshal([]byte(c.must(exitOK, nil, "triage", "--dry-run", "--target", c.store, "-o", "json").stdout), &dry))
			require.Equal(t, map[string]int{"would_quarantine": 3, "would_repair": 2}, dry.Replay.Counts)
			r := c.must(exitOK, nil, "triage", "--dry-run", "--target", c.store)
			require.Regexp(t, `would_quarantine +3 +dry run: would be moved to quarantine and alerted`, r.stdout)
			require.Regexp(t, `resource_exhausted +would_quarantine +- +- +would be moved to parcels.quarantine.dlt and alerted`, r.stdout)
			require.NotContains(t, r.stdout, "--repair", "triage's words are its own flags'")
			require.Len(t, listIDs(t, c, "--dest", "parcels.poison.dlt"), 5, "a dry run moves nothing")

			var rep triageReport
			require.NoError(t, json.Unmarshal([]byte(c.must(exitOK, nil, "triage", "--target", c.store, "-o", "json").stdout), &rep))
			require.Equal(t, 3, rep.Quarantined)
			require.Equal(t, map[string]int{"quarantined": 3, "repaired": 2}, rep.Replay.Counts)
			require.Len(t, listIDs(t, c, "--dest", "parcels.quarantine.dlt"), 3)
			require.Empty(t, listIDs(t, c, "--dest", "parcels.poison.dlt"))
			r = c.must(exitProblems, nil, "--dest", "parcels.poison.dlt", "replay", "--target", c.store, "--fail-if-none")
			require.Contains(t, r.stderr, "--fail-if-none: no record was replayed")
		})
	}
}
