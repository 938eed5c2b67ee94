package brokertest

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
)

// ListingBaseTime is the earliest dead-letter time among [ListingInputs].
var ListingBaseTime = time.Date(2026, 4, 1, 8, 0, 0, 0, time.UTC)

// ListingInputs returns events whose vertex counts, geometry sizes,
// attempts and dead-letter times order them differently, with ties in
// each, and whose properties and source URIs the text search and the
// source grouping find: for the listing tests.
func ListingInputs() []Input {
	specs := []struct {
		vertices, attempts, hour int
		digits                   int // decimals of each coordinate: the geometry's size
		name, provider           string
		transient                bool
	}{
		{5, 3, 5, 1, "Sudan", "osm", false},
		{12, 1, 2, 6, "Chad", "ign", false},
		{4, 7, 9, 9, "Niger", "osm", false},
		{40, 1, 0, 1, "Canada", "osm", false},
		{12, 2, 7, 2, "South Sudan", "ign", false},
		{7, 9, 1, 12, "Chukotka", "osm", true},
		{100, 1, 3, 1, "Fiji", "usgs", false},
		{4, 4, 8, 3, "Kiribati", "osm", false},
		{9, 3, 6, 5, "Peru", "ign", true},
		{25, 1, 4, 4, "Chile", "osm", false},
	}
	out := make([]Input, len(specs))
	for i, s := range specs {
		var coords strings.Builder
		coords.WriteByte('[')
		for v := range s.vertices - 1 {
			fmt.Fprintf(&coords, "[%.*f,%.*f],", s.digits, float64(v)+0.123456789012, s.digits, float64(v%2)+0.987654321098)
		}
		fmt.Fprintf(&coords, "[%.*f,%.*f]]", s.digits, 0.123456789012, s.digits, 0.987654321098)
		id := "evt-list-" + strconv.Itoa(i)
		payload := `{"event_id":"` + id + `","source_uri":"https://tiles.example/` + s.provider + `/` + strconv.Itoa(i) +
			`","properties":{"name":"` + s.name + `","provider":"` + s.provider + `","rank":` + strconv.Itoa(i) +
			`},"geometry":{"type":"LineString","coordinates":` + coords.String() + `}}`
		var err error = geomErr(classify.ClassInvalidGeometry, classify.StageTopologyValidation, "Too few points[0 0]", nil, 0)
		if s.transient {
			err = classify.Transient(fmt.Errorf("upstream timeout for %s", id))
		}
		out[i] = Input{Payload: []byte(payload), IdempotencyKey: "idem:test:list:" + strconv.Itoa(i), Err: err,
			At: ListingBaseTime.Add(time.Duration(s.hour) * time.Hour), Attempts: s.attempts,
			Source: &envelope.Source{System: "memory", Topic: "spatial.events"}}
	}
	return out
}

// listAll lists every page of opts.
func listAll(t *testing.T, s *broker.Store, opts broker.ListOptions) []broker.Entry {
	t.Helper()
	var all []broker.Entry
	for range 10_000 {
		p, err := s.List(context.Background(), opts)
		require.NoError(t, err, "List %+v", opts)
		require.LessOrEqual(t, len(p.Entries), max(opts.Limit, 1))
		all = append(all, p.Entries...)
		if p.Next == "" {
			return all
		}
		require.NotEqual(t, opts.After, p.Next, "a cursor moves on")
		opts.After = p.Next
	}
	t.Fatal("List never returned a last page")
	return nil
}

func entryIDs(es []broker.Entry) []string {
	ids := make([]string, len(es)) // never nil: compared with require.Equal
	for i, e := range es {
		ids[i] = e.Record.ID
	}
	return ids
}

// listed publishes ListingInputs and a body that is not an envelope to a
// fresh destination, and returns it with its entries as listed in the
// written order, with bodies.
func listed(t *testing.T, h Harness) (*broker.Store, string, []broker.Entry) {
	s := makeStore(t, h)
	if _, ok := s.Driver().(broker.Lister); !ok {
		t.Skipf("adapter %s has no broker.Lister: List answers errors.ErrUnsupported", s.Name())
	}
	d := dest(t, "sorted")
	msgs := Messages(t, ListingInputs())
	publish(t, s, d, msgs[:3]...)
	publish(t, s, d, &broker.Message{Body: []byte("not an envelope")})
	publish(t, s, d, msgs[3:]...)
	written := listAll(t, s, broker.ListOptions{Destination: d, Limit: 1000})
	require.Len(t, written, len(msgs)+1)
	return s, d, written
}

func nativeSort(s *broker.Store, k broker.SortKey) bool {
	c, ok := s.Driver().(broker.ListCapabler)
	return k == broker.SortWritten || (ok && slices.Contains(c.ListCapabilities().Sorts, k))
}

// testListSorted checks that every sort covers every record once, across
// pages of any size, in order of its value, ties in the written order
// (stores that sort natively), in both directions, with summaries and
// with bodies alike.
func testListSorted(t *testing.T, h Harness) {
	s, d, written := listed(t, h)
	order := map[string]int{}
	for i, e := range written {
		order[e.Record.ID] = i
	}
	for _, k := range broker.SortKeys() {
		for _, desc := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/desc=%v", cmp.Or(string(k), "written"), desc), func(t *testing.T) {
				var first []string
				for _, limit := range []int{1, 3, 1000} {
					es := listAll(t, s, broker.ListOptions{Destination: d, Sort: k, Descending: desc, Limit: limit, Summaries: true})
					ids := entryIDs(es)
					require.ElementsMatch(t, entryIDs(written), ids, "pages of %d cover every record once", limit)
					if k == broker.SortWritten {
						want := entryIDs(written)
						if desc {
							slices.Reverse(want)
						}
						require.Equal(t, want, ids, "the written order (pages of %d)", limit)
					}
					for i := 1; i < len(es) && k != broker.SortWritten; i++ {
						a, b := broker.SortValue(es[i-1].Summary, k), broker.SortValue(es[i].Summary, k)
						o := cmp.Compare(order[ids[i-1]], order[ids[i]])
						if desc {
							a, b, o = b, a, -o
						}
						require.LessOrEqual(t, a, b, "ordered by %s (pages of %d): %s before %s", k, limit, ids[i-1], ids[i])
						if a == b && nativeSort(s, k) {
							require.Equal(t, -1, o, "ties in the written order (pages of %d): %s before %s", limit, ids[i-1], ids[i])
						}
					}
					if first == nil {
						first = ids
					} else {
						require.Equal(t, first, ids, "the same order whatever the page size")
					}
				}
				bodies := listAll(t, s, broker.ListOptions{Destination: d, Sort: k, Descending: desc, Limit: 4})
				require.Equal(t, first, entryIDs(bodies), "the same order with bodies")
				for _, e := range bodies {
					require.NotNil(t, e.Record.Message, "without Summaries, entries carry the message")
				}
			})
		}
	}
	_, err := s.List(context.Background(), broker.ListOptions{Destination: d, Sort: "vertices"})
	require.ErrorIs(t, err, broker.ErrInvalidArgument, "an unknown sort is refused")
}

// testListTotal checks Page.Total: the matching records across all pages,
// whatever the page, sort or filter.
func testListTotal(t *testing.T, h Harness) {
	s, d, written := listed(t, h)
	ctx := context.Background()
	filters := map[string]broker.Filter{
		"none":     {},
		"class":    {Classes: []classify.Class{classify.ClassTransient}},
		"text":     {Text: "sudan"},
		"source":   {SourcePointer: "/properties/provider", Sources: []string{"osm"}},
		"no-match": {Text: "atlantis"},
		"since":    {Since: ListingBaseTime.Add(4 * time.Hour)},
		"until":    {Until: ListingBaseTime.Add(6 * time.Hour), Classes: []classify.Class{classify.ClassInvalidGeometry}},
	}
	for name, f := range filters {
		want := 0
		for _, e := range written {
			if f.IsZero() || f.MatchRecord(e.Record) {
				want++
			}
		}
		for _, k := range []broker.SortKey{broker.SortWritten, broker.SortVertexCount} {
			opts := broker.ListOptions{Destination: d, Filter: f, Sort: k, Limit: 2, Total: true, Summaries: true}
			for page := 0; ; page++ {
				p, err := s.List(ctx, opts)
				require.NoError(t, err)
				require.Equal(t, want, p.Total, "filter %s, sort %q, page %d: Total counts every matching record", name, k, page)
				require.False(t, p.TotalIsLowerBound, "filter %s: without TotalCap, Total is exact", name)
				if p.Next == "" {
					break
				}
				opts.After = p.Next
			}
			// With TotalCap a store may stop counting at the cap, and then
			// says so; else Total is the count.
			for _, limit := range []int{1, 2, want, want + 3} {
				if limit <= 0 {
					continue
				}
				opts := broker.ListOptions{Destination: d, Filter: f, Sort: k, Limit: 2, Total: true, Summaries: true, TotalCap: limit}
				p, err := s.List(ctx, opts)
				require.NoError(t, err)
				if p.TotalIsLowerBound {
					require.Less(t, limit, want, "filter %s, sort %q, cap %d: a lower bound only when more match", name, k, limit)
					require.Equal(t, limit, p.Total, "filter %s, sort %q: a lower bound is the cap", name, k)
				} else {
					require.Equal(t, want, p.Total, "filter %s, sort %q, cap %d: else the count", name, k, limit)
				}
			}
		}
	}
	p, err := s.List(ctx, broker.ListOptions{Destination: d, Limit: 2})
	require.NoError(t, err)
	require.Zero(t, p.Total, "no Total unless asked")
}

// testListSummaries checks that a listing of summaries carries no message
// and the same summary as the record's body says.
func testListSummaries(t *testing.T, h Harness) {
	s, d, written := listed(t, h)
	for _, pointer := range []string{"", "/properties/provider", "/properties/rank", "/nowhere"} {
		sums := listAll(t, s, broker.ListOptions{Destination: d, Summaries: true, Limit: 5,
			Filter: broker.Filter{SourcePointer: pointer}})
		require.Equal(t, entryIDs(written), entryIDs(sums))
		for i, e := range sums {
			require.Nil(t, e.Record.Message, "a summary listing holds no message")
			require.NotNil(t, e.Summary, "a summary listing sets Summary")
			want := broker.SummaryOf(written[i].Record, pointer)
			require.Equal(t, summaryJSON(t, &want), summaryJSON(t, e.Summary), "record %s: the stored summary is the body's", e.Record.ID)
			require.Equal(t, want.Source, e.Summary.Source, "record %s: the source at %q", e.Record.ID, pointer)
			require.Equal(t, written[i].Status, e.Status)
		}
	}
	sums := listAll(t, s, broker.ListOptions{Destination: d, Summaries: true, Limit: 100,
		Filter: broker.Filter{SourcePointer: "/properties/provider"}})
	var providers []string
	for _, e := range sums {
		if e.Summary.Envelope {
			providers = append(providers, e.Summary.Source)
		}
	}
	require.Contains(t, providers, "usgs", "the source is the value at the pointer")
}

func summaryJSON(t *testing.T, s *broker.Summary) string {
	t.Helper()
	c := *s
	c.DeadLetteredAt = c.DeadLetteredAt.UTC()
	b, err := json.Marshal(c)
	require.NoError(t, err)
	return string(b)
}

// testListSearch checks the text and source filters in listings, and
// Stats grouped by source.
func testListSearch(t *testing.T, h Harness) {
	s, d, written := listed(t, h)
	ctx := context.Background()
	for _, f := range []broker.Filter{
		{Text: "SUDAN"},      // a property, any case: "Sudan" and "South Sudan"
		{Text: "evt-list-1"}, // an event id: evt-list-1
		{Text: "timeout"},    // an error message
		{Text: "too few"},    // a reason
		{Text: "tiles.example/usgs"},
		{Text: "zz-nothing"},
		{SourcePointer: "/properties/provider", Sources: []string{"ign", "usgs"}},
		{SourcePrefix: "https://tiles.example/osm/"},
		{SourcePointer: "/properties/rank", Sources: []string{"7"}},
		{SourcePointer: "/properties/name", SourcePrefix: "Ch", Classes: []classify.Class{classify.ClassInvalidGeometry}},
	} {
		want := []string{}
		for _, e := range written {
			if f.MatchRecord(e.Record) {
				want = append(want, e.Record.ID)
			}
		}
		for _, sum := range []bool{true, false} {
			got := listAll(t, s, broker.ListOptions{Destination: d, Filter: f, Summaries: sum, Limit: 3})
			require.Equal(t, want, entryIDs(got), "filter %+v (summaries %v) lists exactly the matching records", f, sum)
		}
	}
	got := listAll(t, s, broker.ListOptions{Destination: d, Filter: broker.Filter{Text: "sudan"}, Summaries: true, Limit: 10})
	require.Len(t, got, 2, "Sudan and South Sudan")

	counts, err := s.Stats(ctx, broker.StatsOptions{Destination: d, BySource: true,
		Filter: broker.Filter{SourcePointer: "/properties/provider"}})
	require.NoError(t, err)
	by := map[string]int{}
	for _, c := range counts {
		by[c.Source] += c.Total()
	}
	require.Equal(t, map[string]int{"osm": 6, "ign": 3, "usgs": 1, "": 1}, by, "Stats by source")
	counts, err = s.Stats(ctx, broker.StatsOptions{Destination: d, BySource: true, SourceDepth: 1,
		Filter: broker.Filter{Classes: []classify.Class{classify.ClassInvalidGeometry}}})
	require.NoError(t, err)
	clear(by)
	for _, c := range counts {
		by[c.Source] += c.Total()
	}
	require.Equal(t, map[string]int{"https://tiles.example": 8}, by, "Stats by source cut to one part")
	counts, err = s.Stats(ctx, broker.StatsOptions{Destination: d, BySource: true, SourceDepth: 2, Filter: broker.Filter{Text: "sudan"}})
	require.NoError(t, err)
	clear(by)
	for _, c := range counts {
		by[c.Source] += c.Total()
	}
	require.Equal(t, map[string]int{"https://tiles.example/osm": 1, "https://tiles.example/ign": 1}, by, "Stats filtered by text, by source cut to two parts")
}

// testListMaxBytes checks that pages with bodies end at MaxBytes (stores
// that declare it) and still cover every record.
func testListMaxBytes(t *testing.T, h Harness) {
	s, d, written := listed(t, h)
	largest := 0
	for _, e := range written {
		largest = max(largest, len(e.Record.Message.Body))
	}
	c, ok := s.Driver().(broker.ListCapabler)
	declared := ok && c.ListCapabilities().MaxBytes
	for _, k := range []broker.SortKey{broker.SortWritten, broker.SortGeometryBytes} {
		opts := broker.ListOptions{Destination: d, Sort: k, Limit: 1000, MaxBytes: largest + 1}
		var ids []string
		for range 100 {
			p, err := s.List(context.Background(), opts)
			require.NoError(t, err)
			require.NotEmpty(t, p.Entries, "a page holds at least one record")
			size := 0
			for _, e := range p.Entries {
				size += len(e.Record.Message.Body)
				ids = append(ids, e.Record.ID)
			}
			if declared && len(p.Entries) > 1 {
				require.LessOrEqual(t, size, opts.MaxBytes, "a page's bodies stay within MaxBytes")
			}
			if p.Next == "" {
				break
			}
			opts.After = p.Next
		}
		require.ElementsMatch(t, entryIDs(written), ids, "pages cut by MaxBytes cover every record once (sort %q)", k)
	}
}
