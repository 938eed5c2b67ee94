package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/geodlq/geodlq/broker"
)

type listOptions struct {
	f        filterFlags
	out      *output
	limit    int
	after    string
	sort     string
	follow   bool
	interval time.Duration
}

// listPage is what list writes with -o json. Field names are stable.
type listPage struct {
	Items []view `json:"items"`
	// Next is the cursor of the next page (--after), "" after the last.
	Next string `json:"next,omitempty"`
	// Total is the number of records that match, across all pages.
	Total int `json:"total"`
}

func newListCmd(a *app) *cobra.Command {
	var o listOptions
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List dead-lettered records: filtered, paged, sorted, or followed as they arrive",
		Long: `list prints the dead-lettered records of the selected destinations (--dest,
default every destination holding envelopes), oldest first: pending ones, and
replayed ones too with --all. Every filter is applied by the store where it
can (the source prefix here).

--limit N prints one page of N records and the cursor of the next one (on
stderr for -o table, wide and jsonl; as "next" with -o json): pass it to
--after to carry on; the number of records that match, across all pages, goes
to stderr ("total" with -o json). --sort vertices, size (the geometry's
bytes), attempts, time (the dead-letter time) or id (the order written) orders
across all pages, in the store: --sort -vertices --limit 20 is the twenty
largest geometries of the whole selection (a leading "-" is descending).
--sort dest, status, event, class, stage, reason or epsg orders the rows
printed (within the page with --limit).

--text finds a word in the event id, the reason, the error message and the
event's properties (--text sudan finds the events whose properties.name is
Sudan); --source-pointer names the member that is the event's source
(default /source_uri) for --source-prefix, the wide SOURCE column and
-o json's source_uri field.

-o table and wide read each record's summary, never its body, so a page
costs the same whatever the size of its records.

--follow prints the records, then new ones as they are dead-lettered, until
Ctrl-C (like kcat -C or kubectl logs -f).

-o table fits the terminal, cutting the reason; -o wide cuts nothing and adds
the attempts and the payload's source; -o json writes {"items":[…],"next":…};
-o jsonl one record per line.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.list(cmd, o) },
	}
	o.f.register(cmd.Flags(), true)
	fs := cmd.Flags()
	o.out = addOutput(cmd, fmtTable, fmtWide, fmtJSON, fmtJSONL)
	fs.IntVar(&o.limit, "limit", 0, "print at most this many records, and the cursor of the next page (0: all)")
	fs.StringVar(&o.after, "after", "", "carry on after this cursor (from a previous --limit page)")
	fs.StringVar(&o.sort, "sort", "", "sort across all pages by vertices, size, attempts, time or id, or within the page by dest, status, event, class, stage, reason or epsg; -FIELD reverses")
	fs.BoolVarP(&o.follow, "follow", "f", false, "keep printing new records as they are dead-lettered, until Ctrl-C")
	fs.DurationVar(&o.interval, "interval", time.Second, "with --follow, how often the store is asked for new records")
	return cmd
}

// listCursor is the opaque --after cursor: the destination to resume in
// and the store's own cursor within it.
type listCursor struct {
	Dest  string `json:"d"`
	After string `json:"a,omitempty"`
	// All is a listing of every selected destination at once (a sort
	// across destinations): Dest is "".
	All bool `json:"all,omitempty"`
}

func (c listCursor) String() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func parseCursor(s string) (listCursor, error) {
	var c listCursor
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) > 4096 || json.Unmarshal(b, &c) != nil || (c.Dest == "") != c.All {
		return c, fmt.Errorf("%q is not a cursor printed by geodlq list --limit", s)
	}
	return c, nil
}

func (a *app) list(cmd *cobra.Command, o listOptions) (err error) {
	if err := o.out.resolve(a, cmd); err != nil {
		return err
	}
	sel, err := o.f.parse(cmd, time.Now())
	if err != nil {
		return err
	}
	switch {
	case o.limit < 0:
		return usageFor(cmd, "--limit must not be negative")
	case o.follow && o.out.json():
		return usageFor(cmd, "--follow writes records as they come: use -o table, wide or jsonl")
	case o.follow && o.interval < 10*time.Millisecond:
		return usageFor(cmd, "--interval must be at least 10ms")
	}
	sortBy, desc, err := parseSort(o.sort)
	if err != nil {
		return usageFor(cmd, "--sort: %v", err)
	}
	var cur *listCursor
	if o.after != "" {
		c, err := parseCursor(o.after)
		if err != nil {
			return usageFor(cmd, "--after: %v", err)
		}
		cur = &c
	}
	ctx := cmd.Context()
	s, err := a.openStore(ctx, readOnly)
	if err != nil {
		return err
	}
	defer closeWith(&err, s)
	dests, err := a.destinations(ctx, s)
	if err != nil {
		return err
	}
	lp := listPaging{sel: sel, limit: o.limit, summaries: !o.out.json() && !o.out.jsonl()}
	if k, ok := storeSorts[sortBy]; ok {
		lp.sort, lp.desc, lp.sorted = k, desc, true
		sortBy = ""
		// A store sorts every record by an index of its own: listing every
		// destination at once (and leaving out the unselected ones) is
		// what that index serves, where one destination's sort may not be.
		all, err := s.Destinations(ctx)
		if err != nil {
			return fmt.Errorf("listing destinations: %w", cannotList(s, err))
		}
		lp.whole = len(all) == len(dests)
	}
	if (o.out.json() || o.out.jsonl()) && sortBy == "" && !o.follow {
		// Each record is written as it is read, and let go of before the
		// next: the output is never held whole.
		return a.listStream(ctx, s, sel, dests, cur, lp, o.out.json())
	}
	views, next, err := a.listPage(ctx, s, dests, cur, lp)
	if err != nil {
		return err
	}
	if sortBy != "" {
		sortViews(views, sortBy, desc)
	}
	total, atLeast := 0, false
	if !o.follow {
		// The table's total may stop at listTotalCap (a common word);
		// JSON's is exact.
		limit := listTotalCap
		if o.out.json() {
			limit = 0
		}
		if total, atLeast, err = a.listTotal(ctx, s, sel, dests, limit); err != nil {
			return err
		}
	}
	var widths []int
	switch {
	case o.out.json():
		return writeJSON(a.stdout, listPage{Items: views, Next: next, Total: total})
	case o.out.jsonl():
		for _, v := range views {
			if err := writeJSONLine(a.stdout, v); err != nil {
				return err
			}
		}
	case len(views) == 0:
		// No table of a header alone: say so, on stderr (as kubectl
		// does), and name what was looked at.
		what := "no records"
		if !sel.filter.IsZero() || sel.clientSide() || sel.replayed {
			what = "no records match the filters"
		}
		if !sel.replayed {
			what += " (pending; --all includes replayed ones)"
		}
		fmt.Fprintf(a.stderr, "%s in %s\n", what, strings.Join(dests, ", "))
	default:
		t := listTable(views, o.out.wide())
		width := a.width
		if o.out.wide() {
			width = 0
		}
		if widths, err = t.render(a.stdout, width, true); err != nil {
			return err
		}
	}
	if next != "" {
		fmt.Fprintf(a.stderr, "%d of %s matching records; more records: --after %s\n", len(views), totalText(total, atLeast), next)
	} else if len(views) > 0 && !o.follow && (o.limit > 0 || o.after != "") {
		fmt.Fprintf(a.stderr, "%s matching records\n", totalText(total, atLeast))
	}
	if !o.follow {
		return nil
	}
	return a.follow(ctx, s, sel, o, views, widths)
}

// listStream writes list's page as -o json (a listPage, byte for byte as
// writeJSON writes it) or -o jsonl, one record at a time, as listPage
// reads them, and the page's cursor and total after them.
func (a *app) listStream(ctx context.Context, s *broker.Store, sel selection, dests []string, cur *listCursor, p listPaging, page bool) error {
	w := bufio.NewWriter(a.stdout)
	var item bytes.Buffer
	enc := json.NewEncoder(&item)
	enc.SetEscapeHTML(false)
	if page {
		enc.SetIndent("    ", "  ") // an element of "items", as writeJSON indents it
		w.WriteString("{\n  \"items\": [")
	}
	n := 0
	p.emit = func(v view) error {
		item.Reset()
		if err := enc.Encode(v); err != nil {
			return err
		}
		switch {
		case !page:
		case n == 0:
			w.WriteString("\n    ")
		default:
			w.WriteString(",\n    ")
		}
		n++
		b := item.Bytes()
		if page {
			b = b[:len(b)-1] // Encode's newline
		}
		_, err := w.Write(b)
		return err
	}
	_, next, err := a.listPage(ctx, s, dests, cur, p)
	if err != nil {
		w.Flush()
		return err
	}
	limit := listTotalCap
	if page {
		limit = 0 // JSON's total is exact
	}
	total, atLeast, err := a.listTotal(ctx, s, sel, dests, limit)
	if err != nil {
		w.Flush()
		return err
	}
	if page {
		if n > 0 {
			w.WriteString("\n  ")
		}
		w.WriteString("]")
		if next != "" {
			nj, _ := json.Marshal(next)
			w.WriteString(",\n  \"next\": " + string(nj))
		}
		w.WriteString(",\n  \"total\": " + strconv.Itoa(total) + "\n}\n")
	}
	if err := w.Flush(); err != nil {
		return err
	}
	switch {
	case page: // "next" and "total" say it
	case next != "":
		fmt.Fprintf(a.stderr, "%d of %s matching records; more records: --after %s\n", n, totalText(total, atLeast), next)
	case n > 0 && (p.limit > 0 || cur != nil):
		fmt.Fprintf(a.stderr, "%s matching records\n", totalText(total, atLeast))
	}
	return nil
}

// listPaging is how list reads its page.
type listPaging struct {
	sel   selection
	limit int // 0: all
	// sorted: the store orders by sort (descending with desc) across all
	// pages, and across the selected destinations at once.
	sort         broker.SortKey
	desc, sorted bool
	// whole: the selected destinations are all the store has.
	whole bool
	// summaries reads summaries only (the table's fields), never a body.
	summaries bool
	// emit, when set, is given each view as it is read, in place of
	// listPage returning them.
	emit func(view) error
}

// storeSorts are the --sort fields the store orders by across all pages.
var storeSorts = map[string]broker.SortKey{
	"id": broker.SortWritten, "at": broker.SortDeadLetteredAt, "vertices": broker.SortVertexCount,
	"size": broker.SortGeometryBytes, "attempts": broker.SortAttempts,
}

// listPage reads up to p.limit records from cur on, and returns them with
// the cursor of the next page.
func (a *app) listPage(ctx context.Context, s *broker.Store, dests []string, cur *listCursor, p listPaging) ([]view, string, error) {
	views := []view{}
	n := 0 // views read, emitted or not
	add := func(v view) error {
		n++
		if p.emit != nil {
			return p.emit(v)
		}
		views = append(views, v)
		return nil
	}
	start := 0
	after := ""
	all := p.sorted && (len(dests) > 1 || p.whole)
	if cur != nil {
		if cur.All != all {
			return nil, "", usagef("--after: the cursor is of a listing with another --sort or --dest")
		}
		if !all {
			start = slices.Index(dests, cur.Dest)
			if start < 0 {
				return nil, "", usagef("--after: the cursor's destination %q is not among the selected ones", cur.Dest)
			}
		}
		after = cur.After
	}
	selected := map[string]bool{}
	for _, d := range dests {
		selected[d] = true
	}
	rl := &releasingLister{l: s}
	for i := start; i < len(dests); i++ {
		d := dests[i]
		if all {
			d = ""
		}
		lo := broker.ListOptions{Destination: d, Filter: p.sel.filter, IncludeReplayed: p.sel.replayed, After: after,
			Sort: p.sort, Descending: p.desc, Summaries: p.summaries}
		after = ""
		at := func(next string) string {
			if all {
				return listCursor{All: true, After: next}.String()
			}
			return listCursor{Dest: d, After: next}.String()
		}
		for {
			lo.Limit = broker.MaxListLimit
			if p.limit > 0 {
				lo.Limit = min(p.limit-n, broker.MaxListLimit)
			}
			pg, err := rl.List(ctx, lo)
			if err != nil {
				return nil, "", fmt.Errorf("reading %q: %w", d, cannotList(s, err))
			}
			for j, e := range pg.Entries {
				pg.Entries[j] = broker.Entry{} // let go of each body before the next is decoded
				var err error
				switch {
				case e.Record == nil || !selected[e.Record.Destination]:
				case e.Summary != nil:
					if e.Summary.Envelope || p.sel.filter.IsZero() {
						err = add(viewOfSummary(e))
					}
				default:
					if it := itemOf(e); p.sel.keep(it) {
						err = add(viewOf(it, p.sel.filter.SourcePointer))
					}
				}
				if err != nil {
					return nil, "", err
				}
			}
			full := p.limit > 0 && n >= p.limit
			if pg.Next == "" || pg.Next == lo.After {
				if full && i+1 < len(dests) && !all {
					return views, listCursor{Dest: dests[i+1]}.String(), nil
				}
				break
			}
			if full {
				return views, at(pg.Next), nil
			}
			lo.After = pg.Next
		}
		if all {
			break
		}
	}
	return views, "", nil
}

// listTotalCap is the ListOptions.TotalCap of list's table: counting a
// common word's matches in a million records would take seconds.
const listTotalCap = 1000

// listTotal counts the records that match in the selected destinations
// (the store counts: Page.Total), each count stopping at limit (see
// broker.ListOptions.TotalCap; 0: exact): atLeast reports that the sum is
// a lower bound.
func (a *app) listTotal(ctx context.Context, s *broker.Store, sel selection, dests []string, limit int) (n int, atLeast bool, err error) {
	for _, d := range dests {
		p, err := s.List(ctx, broker.ListOptions{Destination: d, Filter: sel.filter, IncludeReplayed: sel.replayed,
			Limit: 1, Summaries: true, Total: true, TotalCap: limit})
		if err != nil {
			return 0, false, fmt.Errorf("counting %q: %w", d, cannotList(s, err))
		}
		n += p.Total
		atLeast = atLeast || p.TotalIsLowerBound
	}
	return n, atLeast, nil
}

// totalText is a total as list prints it: "≥ n" for a lower bound.
func totalText(n int, atLeast bool) string {
	if atLeast {
		return "≥ " + strconv.Itoa(n)
	}
	return strconv.Itoa(n)
}

// viewOfSummary is the view of a record listed as a summary: the table's
// fields, without the body's others.
func viewOfSummary(e broker.Entry) view {
	r, sum := e.Record, e.Summary
	v := view{
		ID: r.ID, Destination: r.Destination, Status: string(e.Status), Envelope: sum.Envelope,
		PublishedAt: stamp(e.PublishedAt), ReplayedAt: stamp(e.ReplayedAt),
	}
	if sum.ReplayOf != "" {
		v.Headers = map[string]string{broker.HeaderReplayOf: sum.ReplayOf}
	}
	if !sum.Envelope {
		return v
	}
	v.EventID, v.FailureClass, v.FailedStage = sum.EventID, string(sum.Class), string(sum.Stage)
	v.Reason, v.ReasonKind, v.Location, v.Fault = sum.Reason, string(sum.ReasonKind), sum.Location, sum.Fault
	v.EPSG, v.GeometryType, v.VertexCount, v.GeometryBytes = sum.EPSG, sum.GeometryType, sum.VertexCount, sum.GeometryBytes
	v.GeometryOffloadURI, v.PayloadOffloadURI, v.PayloadSize = sum.GeometryOffloadURI, sum.PayloadOffloadURI, sum.PayloadBytes
	v.Attempts, v.DeadLetteredAt, v.SourceURI = sum.Attempts, stamp(sum.DeadLetteredAt), sum.Source
	return v
}

// follow polls the selected destinations every o.interval, newest first,
// and prints the records it has not seen, oldest first, until ctx ends.
func (a *app) follow(ctx context.Context, s *broker.Store, sel selection, o listOptions, shown []view, widths []int) error {
	seen := map[string]bool{}
	for _, v := range shown {
		seen[v.Destination+"/"+v.ID] = true
	}
	poll := func(mark bool) ([]view, error) {
		dests, err := a.destinations(ctx, s)
		if err != nil {
			return nil, err
		}
		var fresh []view
		for _, d := range dests {
			lo := broker.ListOptions{Destination: d, Filter: sel.filter, IncludeReplayed: sel.replayed, Descending: true, Limit: 100}
			for {
				p, err := s.List(ctx, lo)
				if err != nil {
					return nil, fmt.Errorf("reading %q: %w", d, cannotList(s, err))
				}
				old := false
				for _, e := range p.Entries {
					if e.Record == nil {
						continue
					}
					k := d + "/" + e.Record.ID
					if seen[k] {
						old = true
						continue
					}
					seen[k] = true
					if it := itemOf(e); !mark && sel.keep(it) {
						fresh = append(fresh, viewOf(it, sel.filter.SourcePointer))
					}
				}
				if old || mark || p.Next == "" || p.Next == lo.After {
					break
				}
				lo.After = p.Next
			}
		}
		slices.Reverse(fresh)
		return fresh, nil
	}
	if _, err := poll(true); err != nil { // the newest records already there
		return err
	}
	t := time.NewTicker(o.interval)
	defer t.Stop()
	header := widths == nil
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		fresh, err := poll(false)
		if err != nil {
			return err
		}
		if len(fresh) == 0 {
			continue
		}
		if o.out.jsonl() {
			for _, v := range fresh {
				if err := writeJSONLine(a.stdout, v); err != nil {
					return err
				}
			}
			continue
		}
		tb := listTable(fresh, o.out.wide())
		tb.minWidths = widths
		width := a.width
		if o.out.wide() {
			width = 0
		}
		if widths, err = tb.render(a.stdout, width, header); err != nil {
			return err
		}
		header = false
		if len(seen) > 1_000_000 {
			seen = map[string]bool{} // bounded: the next poll marks the newest again
			if _, err := poll(true); err != nil {
				return err
			}
		}
	}
}

func listTable(views []view, wide bool) *tbl {
	header := []string{"ID", "DEST", "STATUS", "EVENT", "CLASS", "STAGE", "REASON", "AT", "EPSG", "DEAD-LETTERED"}
	if wide {
		header = append(header, "ATTEMPTS", "SOURCE")
	}
	t := &tbl{header: header, flex: []int{6, 7, 3}}
	for _, v := range views {
		t.rows = append(t.rows, listRow(v, wide))
	}
	return t
}

func listRow(v view, wide bool) []string {
	var row []string
	if !v.Envelope {
		what := "(not an envelope)"
		if r := v.Headers[broker.HeaderReplayOf]; r != "" {
			what = "(replay of " + r + ")"
		}
		row = []string{v.ID, v.Destination, orDash(v.Status), orDash(v.EventID), what, "-", "-", "-", "-", orDash(shortTime(v.PublishedAt))}
		if wide {
			row = append(row, "-", "-")
		}
		return row
	}
	reason := v.Reason
	if reason == "" {
		reason = v.ErrorMessage
	}
	row = []string{v.ID, v.Destination, orDash(v.Status), v.EventID, v.FailureClass, v.FailedStage, orDash(reason),
		where(v.Location, v.Fault), epsgLabel(v.EPSG), shortTime(v.DeadLetteredAt)}
	if wide {
		row = append(row, strconv.Itoa(v.Attempts), orDash(v.SourceURI))
	}
	return row
}

// epsgLabel is how every table writes an EPSG code: "-" when none is
// known (the one placeholder for "no EPSG").
func epsgLabel(code int) string {
	if code == 0 {
		return "-"
	}
	return strconv.Itoa(code)
}

var sortFields = []string{"id", "dest", "status", "event", "class", "stage", "reason", "epsg", "at", "vertices", "size", "attempts"}

func parseSort(s string) (string, bool, error) {
	if s == "" {
		return "", false, nil
	}
	desc := strings.HasPrefix(s, "-")
	f := strings.TrimPrefix(s, "-")
	switch f {
	case "dead_lettered_at", "time":
		f = "at"
	case "vertex_count":
		f = "vertices"
	case "geometry_bytes", "bytes":
		f = "size"
	}
	if !slices.Contains(sortFields, f) {
		return "", false, fmt.Errorf("%q: want one of %s (-FIELD reverses)", s, strings.Join(sortFields, ", "))
	}
	return f, desc, nil
}

func sortViews(vs []view, by string, desc bool) {
	key := func(v view) string {
		switch by {
		case "dest":
			return v.Destination
		case "status":
			return v.Status
		case "event":
			return v.EventID
		case "class":
			return v.FailureClass
		case "stage":
			return v.FailedStage
		case "reason":
			return v.ReasonKind + "\x00" + v.Reason
		case "at":
			if v.DeadLetteredAt != "" {
				return shortTime(v.DeadLetteredAt)
			}
			return shortTime(v.PublishedAt)
		}
		return ""
	}
	slices.SortStableFunc(vs, func(x, y view) int {
		var c int
		switch by {
		case "id":
			xi, xe := strconv.ParseInt(x.ID, 10, 64)
			yi, ye := strconv.ParseInt(y.ID, 10, 64)
			if xe == nil && ye == nil {
				c = cmp.Compare(xi, yi)
			} else {
				c = cmp.Compare(x.ID, y.ID)
			}
		case "epsg":
			c = cmp.Compare(x.EPSG, y.EPSG)
		default:
			c = cmp.Compare(key(x), key(y))
		}
		if desc {
			return -c
		}
		return c
	})
}

// shortTime renders an RFC 3339 stamp to the second.
func shortTime(s string) string {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return s
	}
	return t.UTC().Format("2006-01-02T15:04:05Z")
}
