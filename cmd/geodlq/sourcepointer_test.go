package main

import (
	"encoding/json"
	"io/fs"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/warehouse"
)

// sourceURIRE reads a payload's source_uri, JSON or not.
var sourceURIRE = regexp.MustCompile(`"source_uri":"([^"]+)"`)

// providersOf returns each event's properties.provider, by event id, read
// from the raw payloads (some are not JSON: NaN coordinates).
func providersOf(t *testing.T, envs map[string]*envelope.Envelope) map[string]string {
	t.Helper()
	out := map[string]string{}
	for id, env := range envs {
		m := providerRE.FindSubmatch(env.RawPayload)
		require.NotNil(t, m, "%s", env.RawPayload)
		out[id] = string(m[1])
	}
	return out
}

// TestSourcePointerUsage: a --source-pointer that is not a JSON pointer
// (no leading "/", a "~" escape that is not ~0 or ~1, too long, too deep)
// is a usage error (exit 2) naming the flag, in every command that takes
// one, before anything is read or written.
func TestSourcePointerUsage(t *testing.T) {
	t.Parallel()
	c, _ := genStore(t, 5)
	dir := t.TempDir()
	for _, cmd := range [][]string{
		{"list"}, {"stats"}, {"export", filepath.Join(dir, "x.parquet")},
		{"serve", "--addr", "127.0.0.1:0"}, {"warehouse", "sync", filepath.Join(dir, "wh")},
	} {
		for _, tc := range []struct{ pointer, says string }{
			{"properties/provider", `starts with "/"`},
			{"/properties/a~2b", `"~" must be followed by 0 or 1`},
			{"/" + strings.Repeat("p", 300), "limit 256"},
			{"/a/b/c/d/e/f/g", "deeper than 6 levels"},
		} {
			t.Run(cmd[0]+"/"+tc.says, func(t *testing.T) {
				c := c
				c.t = t
				r := c.must(exitUsage, nil, append(cmd, "--source-pointer", tc.pointer)...)
				require.Contains(t, r.stderr, "--source-pointer")
				require.Contains(t, r.stderr, tc.says)
			})
		}
	}
	require.NoDirExists(t, filepath.Join(dir, "wh"), "nothing written")
	require.NoFileExists(t, filepath.Join(dir, "x.parquet"), "nothing written")
}

// TestServeSourcePointer: geodlq serve --source-pointer chooses the
// event's source for the console: /api/config reports it, every row's
// source is the event's value there (read here from the raw payloads),
// the overview groups by it and the source filter selects by it.
func TestServeSourcePointer(t *testing.T) {
	t.Parallel()
	c, envs := genStore(t, 80)
	providers := providersOf(t, envs)
	sourceURIs := map[string]string{}
	for id, env := range envs {
		m := sourceURIRE.FindSubmatch(env.RawPayload)
		require.NotNil(t, m, "%s", env.RawPayload)
		sourceURIs[id] = string(m[1])
	}
	counts := map[string]int{}
	for _, p := range providers {
		counts[p]++
	}
	for _, tc := range []struct {
		name    string
		pointer []string
		want    func(id string) string // each row's source
		config  string
	}{
		{"provider", []string{"--source-pointer", "/properties/provider"}, func(id string) string { return providers[id] }, "/properties/provider"},
		{"event id", []string{"--source-pointer", "/event_id"}, func(id string) string { return id }, "/event_id"},
		{"default", nil, func(id string) string { return sourceURIs[id] }, "/source_uri"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startServe(t, nil, append([]string{"--store", c.store}, tc.pointer...)...)
			get := func(path string, v any) {
				t.Helper()
				res, err := http.Get(s.url + path)
				require.NoError(t, err)
				defer res.Body.Close()
				require.Equal(t, http.StatusOK, res.StatusCode, path)
				require.NoError(t, json.NewDecoder(res.Body).Decode(v))
			}
			var cfg struct {
				SourcePointer string `json:"source_pointer"`
				Index         struct {
					Ready bool `json:"ready"`
				} `json:"index"`
			}
			// The overview counts the index, built at start.
			require.Eventually(t, func() bool {
				get("api/config", &cfg)
				return cfg.Index.Ready
			}, time.Minute, 20*time.Millisecond, "the console's index is built")
			require.Equal(t, tc.config, cfg.SourcePointer)
			var ans struct {
				Records []struct {
					EventID   string `json:"event_id"`
					SourceURI string `json:"source_uri"`
				} `json:"records"`
				Total int `json:"total"`
			}
			get("api/records?limit=500", &ans)
			require.Len(t, ans.Records, len(envs))
			for _, r := range ans.Records {
				require.Equal(t, tc.want(r.EventID), r.SourceURI, "%s: the Source column", r.EventID)
			}
			if tc.name != "provider" {
				return
			}
			var ov struct {
				Top []struct {
					Key   string `json:"key"`
					Count int    `json:"count"`
				} `json:"top_source_prefixes"`
			}
			get("api/overview", &ov)
			got := map[string]int{}
			for _, kc := range ov.Top {
				got[kc.Key] = kc.Count
			}
			require.Equal(t, counts, got, "the overview groups by provider")
			get("api/records?limit=500&source_prefix=usgs", &ans)
			require.Len(t, ans.Records, counts["usgs-feed"], "the source filter reads the provider")
			for _, r := range ans.Records {
				require.Equal(t, "usgs-feed", providers[r.EventID])
			}
		})
	}
}

// syncedRows reads every row of the warehouse dataset in dir.
func syncedRows(t *testing.T, dir string) []warehouse.Row {
	t.Helper()
	var rows []warehouse.Row
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == warehouse.MetaDir {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".parquet") {
			rs, err := parquet.ReadFile[warehouse.Row](p)
			require.NoError(t, err, p)
			rows = append(rows, rs...)
		}
		return nil
	}))
	return rows
}

// TestWarehouseSyncSourcePointer: warehouse sync --source-pointer fills
// source_uri and source_prefix from the event's value at the pointer;
// the pointer is part of the dataset's selection, so a later sync with
// another (or none) is a usage error that says what differs, and one
// with the same pointer appends.
func TestWarehouseSyncSourcePointer(t *testing.T) {
	t.Parallel()
	c, envs := genStore(t, 60)
	c.blobs = "" // no payloads: no blob store
	providers := providersOf(t, envs)
	dir := filepath.Join(t.TempDir(), "wh")
	c.must(exitOK, nil, "warehouse", "sync", dir, "--settle", "0s", "--source-pointer", "/properties/provider")
	rows := syncedRows(t, dir)
	require.Len(t, rows, len(envs))
	for _, r := range rows {
		require.Equal(t, providers[r.EventID], r.SourceURI, "%s: source_uri is the provider", r.EventID)
		require.Equal(t, providers[r.EventID], r.SourcePrefix, "%s: a provider without slashes is its own prefix", r.EventID)
	}

	for _, tc := range []struct {
		name string
		args []string
		code int
		says []string
	}{
		{"no pointer", nil, exitUsage, []string{
			"another selection", `source_pointer "/properties/provider", this sync unset (the default)`, "new directory"}},
		{"the default spelled out", []string{"--source-pointer", "/source_uri"}, exitUsage, []string{
			`source_pointer "/properties/provider", this sync unset (the default)`}},
		{"another pointer", []string{"--source-pointer", "/properties/name"}, exitUsage, []string{
			`source_pointer "/properties/provider", this sync "/properties/name"`}},
		{"the same pointer", []string{"--source-pointer", "/properties/provider"}, exitOK, []string{"nothing new"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := c
			c.t = t
			r := c.must(tc.code, nil, append([]string{"warehouse", "sync", dir, "--settle", "0s"}, tc.args...)...)
			for _, s := range tc.says {
				require.Contains(t, r.stdout+r.stderr, s)
			}
			require.NotContains(t, r.stderr, "prefix_depth", "only what differs is named")
			require.Len(t, syncedRows(t, dir), len(envs), "the dataset is unchanged")
		})
	}
}

// TestListStatsSourcePointer: list -o wide's SOURCE column and stats'
// source groups read the event's value at --source-pointer, for a top-level
// member and a nested one, as the raw payloads hold it.
func TestListStatsSourcePointer(t *testing.T) {
	t.Parallel()
	c, envs := genStore(t, 60)
	c.blobs = "" // nothing offloaded: no blob store
	providers := providersOf(t, envs)
	for _, tc := range []struct {
		pointer string
		want    func(id string) string
	}{
		{"/properties/provider", func(id string) string { return providers[id] }},
		{"/event_id", func(id string) string { return id }},
	} {
		t.Run(tc.pointer, func(t *testing.T) {
			c := c
			c.t = t
			want := map[string]int{}
			for id := range envs {
				want[tc.want(id)]++
			}
			r := c.must(exitOK, nil, "stats", "--source-pointer", tc.pointer, "-o", "json")
			var rep statsReport
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
			require.Equal(t, want, rep.BySourcePrefix)

			r = c.must(exitOK, nil, "list", "--source-pointer", tc.pointer, "-o", "wide", "--limit", "500")
			byID := map[string]string{}
			for _, v := range listViews(t, c, "--limit", "500") {
				byID[v.ID] = v.EventID
			}
			// -o json's source_uri is the same source as the SOURCE column.
			views := listViews(t, c, "--limit", "500", "--source-pointer", tc.pointer)
			require.Len(t, views, len(envs))
			for _, v := range views {
				require.Equal(t, tc.want(v.EventID), v.SourceURI, "list -o json's source_uri of %s follows --source-pointer", v.EventID)
			}
			// So does export's source_uri.
			ex := c.must(exitOK, nil, "export", "--format", "jsonl", "--source-pointer", tc.pointer)
			exported := strings.Split(strings.TrimSpace(ex.stdout), "\n")
			require.Len(t, exported, len(envs))
			for _, l := range exported {
				var v struct {
					EventID   string `json:"event_id"`
					SourceURI string `json:"source_uri"`
				}
				require.NoError(t, json.Unmarshal([]byte(l), &v))
				require.Equal(t, tc.want(v.EventID), v.SourceURI, "export's source_uri of %s follows --source-pointer", v.EventID)
			}
			lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
			require.Len(t, lines, len(envs)+1)
			require.True(t, strings.HasSuffix(strings.TrimSpace(lines[0]), "SOURCE"), lines[0])
			for _, l := range lines[1:] {
				f := strings.Fields(l)
				require.Equal(t, tc.want(byID[f[0]]), f[len(f)-1], "the SOURCE column of %s", l)
			}
		})
	}
}

// TestDefaultSourceNotJSON: without --source-pointer, every reader of an
// event's source reads the same one, including from the payloads that
// are not JSON (dlqgen's NaN coordinates): list -o json and -o wide,
// show -o json, stats and warehouse sync all give the payload's
// source_uri (read here from the raw bytes), as the console does.
func TestDefaultSourceNotJSON(t *testing.T) {
	t.Parallel()
	c, envs := genStore(t, 60)
	c.blobs = "" // no payloads: no blob store
	want := map[string]string{}
	notJSON := 0
	for id, env := range envs {
		m := sourceURIRE.FindSubmatch(env.RawPayload)
		require.NotNil(t, m, "%s", env.RawPayload)
		want[id] = string(m[1])
		if !json.Valid(env.RawPayload) {
			require.Contains(t, string(env.RawPayload), "NaN")
			notJSON++
		}
	}
	require.Positive(t, notJSON, "the store holds payloads that are not JSON")

	views := listViews(t, c, "--limit", "500")
	require.Len(t, views, len(envs))
	recordOf := map[string]string{}
	for _, v := range views {
		recordOf[v.EventID] = v.ID
		require.Equal(t, want[v.EventID], v.SourceURI, "list -o json: the source of %s", v.EventID)
	}

	r := c.must(exitOK, nil, "list", "-o", "wide", "--limit", "500")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, len(envs)+1)
	wide := map[string]string{}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		wide[f[0]] = f[len(f)-1]
	}

	for id, env := range envs {
		if json.Valid(env.RawPayload) {
			continue
		}
		require.Equal(t, want[id], wide[recordOf[id]], "list -o wide: the SOURCE of %s", id)
		r := c.must(exitOK, nil, "show", recordOf[id], "-o", "json")
		var doc struct {
			Record view `json:"record"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
		require.Equal(t, want[id], doc.Record.SourceURI, "show -o json: the source of %s", id)
	}

	counts := map[string]int{}
	for _, v := range want {
		counts[warehouse.SourcePrefix(v, 1)]++
	}
	r = c.must(exitOK, nil, "stats", "-o", "json")
	var rep statsReport
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	require.Equal(t, counts, rep.BySourcePrefix, "stats groups every event by its source")

	dir := filepath.Join(t.TempDir(), "wh")
	c.must(exitOK, nil, "warehouse", "sync", dir, "--settle", "0s")
	rows := syncedRows(t, dir)
	require.Len(t, rows, len(envs))
	for _, row := range rows {
		require.Equal(t, want[row.EventID], row.SourceURI, "warehouse sync: the source_uri of %s", row.EventID)
	}
}
