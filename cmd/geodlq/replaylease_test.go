package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/sqlite"
	"github.com/geodlq/geodlq/internal/corpus"
)

// slowBlobEvents returns n events whose geometries are large enough to be
// offloaded (each its own blob) and invalid (a bowtie among their
// polygons): a replay restores each from the blob store, then repairs it.
func slowBlobEvents(n int) []byte {
	large := string(corpus.LargeMultiPolygon(300 << 10))
	large = strings.TrimSuffix(large, "]}")
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"event_id":"evt-slow-%02d","source_uri":"s3://provider-b/slow/%d.geojson","crs":"EPSG:4326","geometry":%s,[[[%d,80],[%d,81],[%d,80],[%d,81],[%d,80]]]]}}`+"\n",
			i, i, large, 100+i, 101+i, 101+i, 100+i, 100+i)
	}
	return []byte(b.String())
}

// TestReplayKeepsLeases runs geodlq replay over a SQLite store with
// 300 ms leases (?lease_ttl=300ms) where each record takes most of a
// lease to restore (its offloaded geometry is served by a blob store
// that answers each read after 250 ms) and then to repair: one pass over
// the records takes many leases. The run keeps the leases of the records
// it holds alive (renewed one at a time: SQLite renews no batches) and
// examines every record once, dry run or not, re-injecting each record
// once. When another claimer takes the records over mid-run (a second
// store whose clock is two hours ahead: every lease has lapsed for it),
// the run counts the leases it lost, re-injects none of the records
// taken, says INCOMPLETE and exits 1 — before, a run that lost records
// said nothing and exited 0.
func TestReplayKeepsLeases(t *testing.T) {
	t.Parallel()
	const n = 8
	for _, tc := range []struct {
		name  string
		dry   bool
		steal bool
		text  bool // the report for people, not -o json
	}{
		{"dry run", true, false, false},
		{"replay", false, false, false},
		{"dry run, leases stolen", true, true, false},
		{"replay, leases stolen", false, true, false},
		{"leases stolen, in words", true, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dir := t.TempDir()
			path := filepath.Join(dir, "dlq.db")
			backend := s3mem.New()
			require.NoError(t, backend.CreateBucket("dlq-geom"))
			s3 := gofakes3.New(backend).Server()
			var slow atomic.Bool
			var reads atomic.Int64
			var stealOnce sync.Once
			var stolen []*broker.Record
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if slow.Load() && r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/geodlq/") {
					time.Sleep(250 * time.Millisecond)
					if tc.steal && reads.Add(1) == 3 {
						stealOnce.Do(func() { stolen = stealAll(t, ctx, path) })
					}
				}
				s3.ServeHTTP(w, r)
			}))
			t.Cleanup(srv.Close)
			c := cli{t: t, store: "sqlite://" + path + "?lease_ttl=300ms",
				blobs: "s3://dlq-geom?region=us-east-1&use_path_style=true&endpoint=" + srv.URL,
				env: []string{"AWS_ACCESS_KEY_ID=AKIDGEODLQTEST", "AWS_SECRET_ACCESS_KEY=geodlq-test-secret",
					"AWS_EC2_METADATA_DISABLED=true", "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null"}}
			c.must(exitProblems, slowBlobEvents(n), "check", "--dead-letter", "parcels", "-")
			views := listViews(t, c)
			require.Len(t, views, n)
			for _, v := range views {
				require.NotEmpty(t, v.GeometryOffloadURI, "%s offloaded", v.EventID)
				require.Equal(t, "invalid_geometry", v.FailureClass)
			}
			slow.Store(true)

			target := filepath.Join(dir, "target.db")
			args := []string{"replay", "--repair", "make-valid", "--target", "sqlite://" + target}
			if !tc.text {
				args = append(args, "-o", "json")
			}
			if tc.dry {
				args = append(args, "--dry-run")
			}
			code := exitOK
			if tc.steal {
				code = exitProblems
			}
			start := time.Now()
			r := c.must(code, nil, args...)
			took := time.Since(start)
			if tc.text {
				require.Contains(t, r.stdout, "INCOMPLETE: parcels.poison.dlt: ")
				require.Contains(t, r.stdout, "leases were lost during the run")
				require.Contains(t, r.stderr, "geodlq: replay incomplete: ")
				require.Contains(t, r.stderr, "run the same command again")
				return
			}
			var rep replayReport
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), r.stderr)
			require.Len(t, rep.Destinations, 1)
			d := rep.Destinations[0]
			ids := map[string]int{}
			for _, it := range d.Items {
				ids[it.RecordID]++
			}
			for id, k := range ids {
				require.Equal(t, 1, k, "record %s examined once", id)
			}
			msgs := reinjected(t, target, "parcels")
			for ref, ms := range msgs {
				require.Len(t, ms, 1, "re-injected once: %s", ref)
			}
			if !tc.steal {
				require.Greater(t, took, 6*300*time.Millisecond, "one pass takes several leases")
				require.Equal(t, n, rep.Examined, "every record examined: %v", rep.Counts)
				require.Len(t, ids, n)
				require.False(t, rep.Incomplete)
				require.Zero(t, rep.LeasesLost)
				require.Empty(t, d.Incomplete)
				if tc.dry {
					require.Equal(t, map[string]int{"would_repair": n}, rep.Counts)
					require.Empty(t, msgs)
				} else {
					require.Equal(t, map[string]int{"repaired": n}, rep.Counts)
					require.Len(t, msgs, n)
				}
				return
			}
			require.NotEmpty(t, stolen, "the other claimer took records over")
			require.True(t, rep.Incomplete, "a run that lost leases says so: %s", r.stdout)
			require.Positive(t, rep.LeasesLost)
			require.Contains(t, d.Incomplete, "leases were lost")
			require.Contains(t, r.stderr, "replay incomplete")
			for _, s := range stolen {
				_, ok := msgs["parcels.poison.dlt/"+s.ID]
				require.False(t, ok, "record %s, taken over by the other claimer, is not re-injected by this run", s.ID)
			}
		})
	}
}

// stealAll takes over every record of the SQLite store at path not yet
// acknowledged, as another replayer whose clock is two hours ahead would
// (every lease has lapsed for it), and holds them for an hour by its
// clock.
func stealAll(t *testing.T, ctx context.Context, path string) []*broker.Record {
	ahead := func() time.Time { return time.Now().Add(2 * time.Hour) }
	s, err := sqlite.Open(ctx, path, &sqlite.Options{StoreOptions: broker.StoreOptions{LeaseTTL: time.Hour}, Now: ahead})
	if err != nil {
		t.Errorf("opening the other claimer's store: %v", err)
		return nil
	}
	defer s.Close()
	recs, err := s.Fetch(ctx, "parcels.poison.dlt", broker.Filter{}, 100)
	if err != nil {
		t.Errorf("the other claimer's fetch: %v", err)
	}
	return recs
}
