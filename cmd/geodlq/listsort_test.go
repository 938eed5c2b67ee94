package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/dlqgen"
)

// genStore returns a cli on a SQLite store holding n realistic dead
// letters (internal/dlqgen), and their envelopes by event id.
func genStore(t *testing.T, n int) (cli, map[string]*envelope.Envelope) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	url := "sqlite://" + filepath.Join(dir, "dlq.db")
	s, err := broker.OpenStore(ctx, url, &broker.OpenOptions{Create: true})
	require.NoError(t, err)
	g, err := dlqgen.New(nil)
	require.NoError(t, err)
	require.NoError(t, dlqgen.Fill(ctx, s, "spatial.events.poison.dlt", g, n, nil))
	envs := map[string]*envelope.Envelope{}
	require.NoError(t, s.ScanAll(ctx, broker.ListOptions{Limit: broker.MaxListLimit}, func(e broker.Entry) error {
		env, err := envelope.Decode(e.Record.Message.Body)
		require.NoError(t, err)
		envs[env.EventID] = env
		return nil
	}))
	require.NoError(t, s.Close())
	require.Len(t, envs, n)
	return cli{t: t, store: url, blobs: "file://" + filepath.Join(dir, "blobs")}, envs
}

// TestListSortAcrossPages: --sort orders the whole selection, page after
// page (-FIELD descending), every page says the total, and the table (read
// from summaries) agrees with -o json (read from the records).
func TestListSortAcrossPages(t *testing.T) {
	t.Parallel()
	c, envs := genStore(t, 120)
	key := map[string]func(v view) int64{
		"vertices": func(v view) int64 { return int64(v.VertexCount) },
		"size":     func(v view) int64 { return v.GeometryBytes },
		"attempts": func(v view) int64 { return int64(v.Attempts) },
		"time":     func(v view) int64 { return envs[v.EventID].DeadLetteredAt.UnixNano() },
		"id": func(v view) int64 {
			id, err := strconv.ParseInt(v.ID, 10, 64)
			require.NoError(t, err)
			return id
		},
	}
	for field, k := range key {
		for _, desc := range []bool{false, true} {
			arg := field
			if desc {
				arg = "-" + field
			}
			t.Run(arg, func(t *testing.T) {
				t.Parallel() // read-only commands on one store
				c := c
				c.t = t
				var got []view
				after := ""
				for pages := 0; ; pages++ {
					require.Less(t, pages, 100)
					args := []string{"list", "-o", "json", "--sort", arg, "--limit", "13"}
					if after != "" {
						args = append(args, "--after", after)
					}
					r := c.must(exitOK, nil, args...)
					var p listPage
					require.NoError(t, json.Unmarshal([]byte(r.stdout), &p))
					require.Equal(t, len(envs), p.Total, "the total across all pages")
					got = append(got, p.Items...)
					if p.Next == "" {
						break
					}
					after = p.Next
				}
				require.Len(t, got, len(envs), "every record once")
				require.True(t, slices.IsSortedFunc(got, func(x, y view) int {
					c := cmp.Compare(k(x), k(y))
					if desc {
						return -c
					}
					return c
				}), "ordered by %s across pages", arg)
				ids := map[string]bool{}
				for _, v := range got {
					ids[v.ID] = true
				}
				require.Len(t, ids, len(envs))

				r := c.must(exitOK, nil, "list", "-o", "wide", "--sort", arg, "--limit", "5")
				lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
				require.Len(t, lines, 6)
				for i, l := range lines[1:] {
					require.Equal(t, got[i].ID, strings.Fields(l)[0], "the table's row %d", i)
				}
				require.Contains(t, r.stderr, "5 of 120 matching records; more records: --after ")
			})
		}
	}
}

var providerRE = regexp.MustCompile(`"provider":"([^"]+)"`)

// TestListTextAndSourcePointer: --text searches the event's properties,
// and --source-pointer chooses the member list, stats and --source-prefix
// read as the source.
func TestListTextAndSourcePointer(t *testing.T) {
	t.Parallel()
	c, envs := genStore(t, 150)
	var sudan []string
	providers := map[string]int{}
	for id, env := range envs {
		if strings.Contains(strings.ToLower(string(env.RawPayload)), "sudan") {
			sudan = append(sudan, id)
		}
		// (Some payloads are not JSON: NaN coordinates.)
		m := providerRE.FindSubmatch(env.RawPayload)
		require.NotNil(t, m, "%s", env.RawPayload)
		providers[string(m[1])]++
	}
	slices.Sort(sudan)
	require.NotEmpty(t, sudan)
	require.Equal(t, sudan, listIDs(t, c, "--text", "SUDAN"), "the properties are searched")
	r := c.must(exitOK, nil, "list", "--text", "sudan", "-o", "json", "--limit", "1")
	var p listPage
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &p))
	require.Equal(t, len(sudan), p.Total)

	r = c.must(exitOK, nil, "stats", "--source-pointer", "/properties/provider", "-o", "json")
	var rep statsReport
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	require.Equal(t, providers, rep.BySourcePrefix)
	require.Equal(t, len(envs), rep.Total)

	ids := listIDs(t, c, "--source-pointer", "/properties/provider", "--source-prefix", "usgs")
	require.Len(t, ids, providers["usgs-feed"])
	r = c.must(exitOK, nil, "list", "--source-pointer", "/properties/provider", "-o", "wide", "--limit", "3")
	require.Regexp(t, `(provider-a|osm-extracts|ign-export|usgs-feed|provider-b)\s*\n`, r.stdout, "the SOURCE column")
	c.must(exitUsage, nil, "list", "--source-pointer", "properties/provider")
}

// TestListTotalAtLeast: the table's total stops at listTotalCap when more
// records match a filter the store cannot count cheaply, and says "≥";
// -o json's total is exact.
func TestListTotalAtLeast(t *testing.T) {
	t.Parallel()
	n := listTotalCap + 30
	c, _ := genStore(t, n)
	r := c.must(exitOK, nil, "list", "--since", "2000-01-01T00:00:00Z", "--limit", "5")
	require.Contains(t, r.stderr, fmt.Sprintf("5 of ≥ %d matching records; more records: --after ", listTotalCap))
	r = c.must(exitOK, nil, "list", "-o", "json", "--since", "2000-01-01T00:00:00Z", "--limit", "5")
	var p listPage
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &p))
	require.Equal(t, n, p.Total, "JSON's total is exact")
	r = c.must(exitOK, nil, "list", "--limit", "5")
	require.Contains(t, r.stderr, fmt.Sprintf("5 of %d matching records", n), "a count the store keeps is exact")
}
