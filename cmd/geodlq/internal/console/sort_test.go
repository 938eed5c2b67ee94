package console

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// pages reads every page of /api/records with query q, limit rows a page,
// and the total the first page announced.
func (e *env) pages(q url.Values, limit int) ([]row, int) {
	e.t.Helper()
	var rows []row
	total := -1
	cur := ""
	for range 1000 {
		v := url.Values{}
		for k, vs := range q {
			v[k] = vs
		}
		v.Set("limit", strconv.Itoa(limit))
		if cur != "" {
			v.Set("cursor", cur)
		}
		var ans listAnswer
		e.get("/api/records?"+v.Encode(), http.StatusOK, &ans)
		if cur == "" {
			require.NotNil(e.t, ans.Total, "the first page counts the matching records")
			total = *ans.Total
		} else {
			require.Nil(e.t, ans.Total, "later pages do not count again")
		}
		rows = append(rows, ans.Records...)
		if ans.Next == "" {
			return rows, total
		}
		cur = ans.Next
	}
	e.t.Fatal("the list does not end")
	return nil, 0
}

// TestSortedList: every order of the list holds across pages (read 3 a
// page), each record once, and the first page says how many match.
func TestSortedList(t *testing.T) {
	for _, k := range kinds() {
		t.Run(k.name, func(t *testing.T) {
			e := newEnv(t, k, envOptions{readOnly: true})
			all := len(fixtureEvents())
			for _, tc := range []struct {
				sort   string
				filter url.Values
				want   int
				cmp    func(a, b row) int // >0: a must not come before b
			}{
				{"newest", nil, all, func(a, b row) int { return b.DeadLetteredAt.Compare(a.DeadLetteredAt) }},
				{"oldest", nil, all, func(a, b row) int { return a.DeadLetteredAt.Compare(b.DeadLetteredAt) }},
				{"-vertices", nil, all, func(a, b row) int { return b.VertexCount - a.VertexCount }},
				{"vertices", nil, all, func(a, b row) int { return a.VertexCount - b.VertexCount }},
				{"-vertices", url.Values{"class": {"invalid_geometry"}}, -1, func(a, b row) int { return b.VertexCount - a.VertexCount }},
				{"size", nil, all, nil},
				{"-size", nil, all, nil},
				{"attempts", nil, all, func(a, b row) int { return a.Attempts - b.Attempts }},
				{"-attempts", nil, all, func(a, b row) int { return b.Attempts - a.Attempts }},
				{"-vertices", url.Values{"q": {"evt-bowtie"}}, 2, func(a, b row) int { return b.VertexCount - a.VertexCount }},
				{"newest", url.Values{"q": {"evt-eu"}}, 4, func(a, b row) int { return b.DeadLetteredAt.Compare(a.DeadLetteredAt) }},
			} {
				t.Run(tc.sort+"?"+tc.filter.Encode(), func(t *testing.T) {
					q := url.Values{"sort": {tc.sort}}
					for k, v := range tc.filter {
						q[k] = v
					}
					rows, total := e.pages(q, 3)
					require.Len(t, rows, total, "the total is the number of rows the pages hold")
					if tc.want >= 0 {
						require.Equal(t, tc.want, total)
					} else {
						require.Positive(t, total)
						require.Less(t, total, all)
					}
					seen := map[string]bool{}
					for i, r := range rows {
						require.False(t, seen[r.Destination+"/"+r.ID], "record %s listed twice", r.ID)
						seen[r.Destination+"/"+r.ID] = true
						if tc.cmp != nil && i > 0 && rows[i-1].Envelope && r.Envelope {
							require.LessOrEqual(t, tc.cmp(rows[i-1], r), 0, "%s before %s in order %s", rows[i-1].EventID, r.EventID, tc.sort)
						}
					}
				})
			}
			var ordered []int
			rows, _ := e.pages(url.Values{"sort": {"-vertices"}}, 2)
			for _, r := range rows {
				if r.Envelope {
					ordered = append(ordered, r.VertexCount)
				}
			}
			require.True(t, slices.IsSortedFunc(ordered, func(a, b int) int { return b - a }), "largest first: %v", ordered)
			require.NotEqual(t, ordered[0], ordered[len(ordered)-1], "the fixture's vertex counts differ, so the order is tested")
			e.get("/api/records?sort=bogus", http.StatusBadRequest, nil)
		})
	}
}

// TestListTotalCap: the first page's total stops at the cap when more
// records match a filter the store does not count cheaply (a time
// range), and says so; under the cap it is the count.
func TestListTotalCap(t *testing.T) {
	for _, k := range kinds() {
		t.Run(k.name, func(t *testing.T) {
			e := newEnv(t, k, envOptions{readOnly: true})
			all := len(fixtureEvents())
			q := url.Values{"since": {"2000-01-01T00:00:00Z"}, "limit": {"2"}}
			var ans listAnswer
			e.get("/api/records?"+q.Encode(), http.StatusOK, &ans)
			require.NotNil(t, ans.Total)
			require.Equal(t, all, *ans.Total, "under the cap: the count")
			require.False(t, ans.TotalIsLowerBound)

			e.srv.totalCap = 2
			ans = listAnswer{}
			e.get("/api/records?"+q.Encode(), http.StatusOK, &ans)
			require.NotNil(t, ans.Total)
			require.Equal(t, 2, *ans.Total, "the cap")
			require.True(t, ans.TotalIsLowerBound, "said to be a lower bound")
		})
	}
}
