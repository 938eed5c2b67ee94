package console

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// propertyEvents are events whose country and provider are properties
// only: no source_uri names them.
func propertyEvents() []string {
	ev := func(id, provider, country string, x float64) string {
		return fmt.Sprintf(`{"event_id":%q,"crs":"EPSG:4326","properties":{"provider":%q,"admin":%q},"geometry":%s}`,
			id, provider, country, bowtieAt(x, 10))
	}
	return []string{
		ev("evt-p1", "osm", "Sudan", 30), ev("evt-p2", "ign", "Sudan", 31), ev("evt-p3", "osm", "Chad", 20),
		ev("evt-p4", "usgs", "Niger", 10), ev("evt-p5", "osm", "Mali", 0),
	}
}

// TestSourcePointerAndPropertySearch: the text search reads the event's
// properties in every order of the list, and --source-pointer
// (Options.SourcePointer) chooses what the Source column, the source
// filter and the overview's source groups read.
func TestSourcePointerAndPropertySearch(t *testing.T) {
	for _, k := range kinds() {
		t.Run(k.name, func(t *testing.T) {
			e := newEnv(t, k, envOptions{readOnly: true, events: propertyEvents(), sourcePointer: "/properties/provider"})
			var cfg configAnswer
			e.get("/api/config", http.StatusOK, &cfg)
			require.Equal(t, "/properties/provider", cfg.SourcePointer)

			ids := func(rows []row) []string {
				var out []string
				for _, r := range rows {
					out = append(out, r.EventID)
				}
				slices.Sort(out)
				return out
			}
			for _, sort := range []string{"", "newest", "oldest", "-vertices", "vertices", "size", "-size", "attempts", "-attempts"} {
				q := url.Values{"q": {"sudan"}}
				if sort != "" {
					q.Set("sort", sort)
				}
				var ans listAnswer
				e.get("/api/records?"+q.Encode(), http.StatusOK, &ans)
				require.Equal(t, []string{"evt-p1", "evt-p2"}, ids(ans.Records), "sort %q: a word only the properties hold", sort)
			}
			var ans listAnswer
			e.get("/api/records", http.StatusOK, &ans)
			require.Len(t, ans.Records, 5)
			for _, r := range ans.Records {
				require.Contains(t, []string{"osm", "ign", "usgs"}, r.SourceURI, "the Source column shows the provider")
			}
			for _, sort := range []string{"", "-vertices"} {
				q := url.Values{"source_prefix": {"osm"}}
				if sort != "" {
					q.Set("sort", sort)
				}
				e.get("/api/records?"+q.Encode(), http.StatusOK, &ans)
				require.Equal(t, []string{"evt-p1", "evt-p3", "evt-p5"}, ids(ans.Records), "source filter, sort %q", sort)
			}
			var rec recordAnswer
			e.get("/api/records/"+url.PathEscape(dlt)+"/"+url.PathEscape(ans.Records[0].ID), http.StatusOK, &rec)
			require.Equal(t, "osm", rec.SourceURI)

			var ov overviewAnswer
			e.get("/api/overview", http.StatusOK, &ov)
			got := map[string]int{}
			for _, kc := range ov.TopPrefixes {
				got[kc.Key] = kc.Count
			}
			require.Equal(t, map[string]int{"osm": 3, "ign": 1, "usgs": 1}, got)
			e.get("/api/overview?q=sudan", http.StatusOK, &ov)
			require.Equal(t, 2, ov.Total)
		})
	}
}

// TestSourcePointerDefault: without a pointer the source is source_uri,
// and a pointer that is not one is refused.
func TestSourcePointerDefault(t *testing.T) {
	e := newEnv(t, sqliteKind(), envOptions{readOnly: true})
	var cfg configAnswer
	e.get("/api/config", http.StatusOK, &cfg)
	require.Equal(t, "/source_uri", cfg.SourcePointer)
	var ans listAnswer
	e.get("/api/records?q=evt-eu-1", http.StatusOK, &ans)
	require.Len(t, ans.Records, 1)
	require.Equal(t, "s3://provider-b/eu/1.geojson", ans.Records[0].SourceURI)
	_, err := New(Options{Store: e.store, SourcePointer: "properties/provider"})
	require.Error(t, err)
}
