package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/internal/corpus"
)

// listViews runs list -o json with args and returns its records.
func listViews(t *testing.T, c cli, args ...string) []view {
	t.Helper()
	r := c.must(exitOK, nil, append([]string{"list", "-o", "json"}, args...)...)
	var page listPage
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &page))
	return page.Items
}

func listIDs(t *testing.T, c cli, args ...string) []string {
	t.Helper()
	views := listViews(t, c, args...)
	ids := []string{}
	for _, v := range views {
		ids = append(ids, v.EventID)
	}
	slices.Sort(ids)
	return ids
}

// TestListFilters proves each filter of list, server-side (class, stage,
// EPSG, time, bbox) and client-side (reason kind, source prefix).
func TestListFilters(t *testing.T) {
	t.Parallel()
	c := seeded(t)
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"reason kind", []string{"--reason", "self_intersection"}, []string{"evt-9", "evt-gc", "evt-provider-a", "evt-provider-b"}},
		{"reason kinds and class", []string{"--reason", "ring_not_closed,too_few_points", "--class", "invalid_geometry"},
			[]string{"evt-too-few-points", "evt-unclosed-ring"}},
		{"class crs_mismatch and EPSG", []string{"--class", "crs_mismatch", "--epsg", "3857"}, []string{"evt-3857", "evt-named-3857"}},
		{"stage and EPSG 0", []string{"--stage", "crs_transform", "--epsg", "0"}, []string{"evt-unparseable-crs"}},
		{"bbox around the second provider's bowtie", []string{"--bbox", "10.5,10.5,11.5,11.5"}, []string{"evt-provider-b"}},
		{"source prefix", []string{"--source-prefix", "s3://provider-b/"}, []string{"evt-big-1", "evt-big-2", "evt-provider-b"}},
		{"since a duration ago", []string{"--since", "1h", "--class", "resource_exhausted"}, []string{"evt-big-1", "evt-big-2"}},
		{"until a time in the past", []string{"--until", "2000-01-01T00:00:00Z"}, []string{}},
		{"since a time in the future", []string{"--since", future}, []string{}},
		{"limit", []string{"--limit", "1", "--class", "resource_exhausted"}, []string{"evt-big-1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := c
			c.t = t
			require.Equal(t, tt.want, listIDs(t, c, tt.args...))
		})
	}

	// The human table names the fault.
	r := c.must(exitOK, nil, "list", "--reason", "self_intersection", "--dest", "parcels.poison.dlt")
	require.Contains(t, r.stdout, "DEAD-LETTERED")
	require.Contains(t, r.stdout, "(11 11) ring 0 segment 0-1")

	// Nothing to list: no table of a header alone, but a line saying so.
	for _, o := range []string{"table", "wide"} {
		r = c.must(exitOK, nil, "list", "--until", "2000-01-01T00:00:00Z", "-o", o)
		require.Empty(t, r.stdout, o)
		require.Equal(t, "no records match the filters (pending; --all includes replayed ones) in parcels.poison.dlt\n", r.stderr, o)
	}
	r = c.must(exitOK, nil, "list", "--until", "2000-01-01T00:00:00Z", "-o", "json")
	require.JSONEq(t, `{"items":[],"total":0}`, r.stdout)
}

// TestShow proves show finds a record by event id, record id and DEST/ID,
// prints the envelope and the verified payload, and that --raw restores
// the payload byte for byte, offloaded geometry included.
func TestShow(t *testing.T) {
	t.Parallel()
	c := seeded(t)
	bowtie, _ := corpus.Lookup("bowtie")
	r := c.must(exitOK, nil, "show", "evt-9")
	require.Contains(t, r.stdout, "reason        Self-intersection[0.5 0.5] (self_intersection)")
	require.Contains(t, r.stdout, "at            (0.5 0.5) ring 0 segment 0-1")
	require.Contains(t, r.stdout, `"schema_version": "dlq.v1"`)
	require.Contains(t, r.stdout, ", verified):\n"+strings.TrimRight(string(bowtie.Payload), "\n"))

	var shown struct {
		Record          view            `json:"record"`
		Envelope        json.RawMessage `json:"envelope"`
		Payload         string          `json:"payload"`
		PayloadVerified bool            `json:"payload_verified"`
	}
	r = c.must(exitOK, nil, "show", "-o", "json", "evt-9")
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &shown))
	require.True(t, shown.PayloadVerified)
	id := shown.Record.ID

	for _, ref := range []string{"evt-9", id, "parcels.poison.dlt/" + id} {
		raw := c.must(exitOK, nil, "show", "--raw", ref)
		require.Equal(t, strings.TrimRight(string(bowtie.Payload), "\n"), raw.stdout, ref)
	}
	big := c.must(exitOK, nil, "show", "--raw", "evt-big-2")
	require.Equal(t, largeEvent("evt-big-2"), big.stdout, "offloaded geometry restored byte for byte")

	// Without --blobs an offloaded payload cannot be restored: usage error.
	noBlobs := c
	noBlobs.blobs = ""
	noBlobs.must(exitUsage, nil, "show", "--raw", "evt-big-2")
	r = noBlobs.must(exitUsage, nil, "show", "evt-big-2")
	require.Contains(t, r.stdout, "payload: NOT RESTORED")
	c.must(exitUsage, nil, "show", "no-such-event")
}
