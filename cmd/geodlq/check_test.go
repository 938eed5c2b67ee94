package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/internal/corpus"
)

type checkOutput struct {
	Events  []verdict    `json:"events"`
	Summary checkSummary `json:"summary"`
}

// TestCheckCorpus feeds every corpus event to `geodlq check` as JSON lines
// and requires the verdict the corpus expects for each: class, stage,
// reason kind, exact reason, location, fault index and EPSG code.
func TestCheckCorpus(t *testing.T) {
	t.Parallel()
	c := cli{t: t, store: "sqlite://unused.db"}
	items := corpus.All()
	var in bytes.Buffer
	for _, it := range items {
		in.Write(bytes.TrimRight(it.Payload, "\n"))
		in.WriteByte('\n')
	}
	r := c.must(exitProblems, in.Bytes(), "check", "-o", "json")
	var out checkOutput
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
	require.Len(t, out.Events, len(items))
	bad := 0
	for i, it := range items {
		v := out.Events[i]
		require.Equal(t, it.Valid(), v.OK, it.Name)
		require.Equal(t, it.EPSG, v.EPSG, it.Name)
		if it.Valid() {
			continue
		}
		bad++
		require.Equal(t, it.Class.String(), v.FailureClass, it.Name)
		require.Equal(t, it.Stage.String(), v.FailedStage, it.Name)
		require.Equal(t, string(it.Kind), v.ReasonKind, it.Name)
		if it.Reason != "" {
			require.Equal(t, it.Reason, v.Reason, it.Name)
		}
		if it.Location != nil {
			require.Equal(t, []float64{it.Location[0], it.Location[1]}, v.Location, it.Name)
		} else {
			require.Nil(t, v.Location, it.Name)
		}
		require.Equal(t, it.Fault, v.Fault, it.Name)
	}
	require.Equal(t, len(items), out.Summary.Events)
	require.Equal(t, bad, out.Summary.DeadLettered)
	require.Equal(t, len(items)-bad, out.Summary.OK)

	// The table says the same to a person, with a summary by class.
	r = c.must(exitProblems, in.Bytes(), "check")
	require.Contains(t, r.stdout, "Self-intersection[0.5 0.5]")
	require.Contains(t, r.stdout, "(0.5 0.5) ring 0 segment 0-1")
	require.Contains(t, r.stdout, "would be dead-lettered (crs_mismatch ")
}

func TestCheckInputs(t *testing.T) {
	t.Parallel()
	valid, ok := corpus.Lookup("valid_polygon")
	require.True(t, ok)
	bowtie, ok := corpus.Lookup("bowtie")
	require.True(t, ok)
	point := `{"type":"Point","coordinates":[1113194.9,6446275.8]}`
	tests := []struct {
		name    string
		args    []string
		file    bool
		stdin   string
		code    int
		classes []string // "" for ok
		epsg    []int
	}{
		{name: "valid JSON lines pass with exit 0", stdin: string(valid.Payload) + "\r\n\n" + string(valid.Payload), code: exitOK,
			classes: []string{"", ""}, epsg: []int{4326, 4326}},
		{name: "a file argument", file: true, stdin: string(bowtie.Payload), code: exitProblems,
			classes: []string{"invalid_geometry"}, epsg: []int{4326}},
		{name: "the collection's crs goes to features without one", code: exitProblems,
			stdin: `{"type":"FeatureCollection","crs":{"type":"name","properties":{"name":"urn:ogc:def:crs:EPSG::3857"}},"features":[
				{"type":"Feature","properties":{},"geometry":` + point + `},
				{"type":"Feature","crs":"EPSG:4326","properties":{},"geometry":{"type":"Point","coordinates":[10,50]}}]}`,
			classes: []string{"crs_mismatch", ""}, epsg: []int{3857, 4326}},
		{name: "a collection without crs is RFC 7946 CRS84", code: exitProblems,
			stdin: "  {\"features\":[{\"type\":\"Feature\",\"geometry\":{\"type\":\"Point\",\"coordinates\":[10,50]}},\n" +
				`{"type":"Feature","geometry":` + bowtieGeom + `}],"type":"FeatureCollection"}`,
			classes: []string{"", "invalid_geometry"}, epsg: []int{4326, 4326}},
		{name: "expected EPSG is configurable", args: []string{"--expected-epsg", "3857"}, code: exitOK,
			stdin: `{"crs":"EPSG:3857","geometry":` + point + `}`, classes: []string{""}, epsg: []int{3857}},
		{name: "empty input is a usage error", stdin: "\n \n", code: exitUsage},
		{name: "an empty collection is a usage error", stdin: `{"type":"FeatureCollection","features":[]}`, code: exitUsage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := cli{t: t, store: "sqlite://unused.db"}
			args := append([]string{"check", "-o", "json"}, tt.args...)
			var stdin []byte
			if tt.file {
				f := t.TempDir() + "/events.jsonl"
				require.NoError(t, writeFile(f, tt.stdin))
				args = append(args, f)
			} else {
				stdin = []byte(tt.stdin)
			}
			r := c.must(tt.code, stdin, args...)
			if tt.code == exitUsage {
				return
			}
			var out checkOutput
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
			require.Len(t, out.Events, len(tt.classes))
			for i, want := range tt.classes {
				require.Equal(t, want, out.Events[i].FailureClass, "event %d", i)
				require.Equal(t, tt.epsg[i], out.Events[i].EPSG, "event %d", i)
			}
		})
	}
}

// TestCheckDeadLetter proves that check --dead-letter writes envelopes the
// way a consumer does: into <topic>.poison.dlt, large geometries offloaded
// (identical ones once).
func TestCheckDeadLetter(t *testing.T) {
	t.Parallel()
	c := seeded(t)
	views := listViews(t, c)
	bad := 0
	for _, it := range corpus.All() {
		if !it.Valid() {
			bad++
		}
	}
	require.Len(t, views, bad+4)
	var big []view
	for _, v := range views {
		require.Equal(t, "parcels.poison.dlt", v.Destination)
		require.Equal(t, "parcels", v.SourceTopic)
		if v.GeometryOffloadURI != "" {
			big = append(big, v)
		}
	}
	require.Len(t, big, 2)
	require.Equal(t, big[0].GeometryOffloadURI, big[1].GeometryOffloadURI, "identical geometries share one blob")
	require.Equal(t, "resource_exhausted", big[0].FailureClass)
}
