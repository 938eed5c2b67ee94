// Command benchscale measures geodlq on a large store (make bench-scale,
// issue 23): the figures docs/benchmarks.md's scale table reports.
//
//	go run ./cmd/geodlq/internal/scale/benchscale -geodlq ./geodlq -store sqlite:///tmp/big.db
//
// The store is filled beforehand (cmd/geodlq/internal/scale/dlqfill; make
// bench-scale does both). Every command is the built geodlq binary run as
// a process: its elapsed time and its peak RSS (ProcessState.SysUsage's
// Maxrss) are reported. List pages are timed through broker.Store.List in
// this process, -reps times for every filter and sort, and the console's
// /api/records through a `geodlq serve` process over HTTP. Percentiles are
// nearest-rank over the repetitions.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/geodlq/geodlq/broker"
	_ "github.com/geodlq/geodlq/broker/mysql"
	_ "github.com/geodlq/geodlq/broker/postgis"
	_ "github.com/geodlq/geodlq/broker/redisstream"
	_ "github.com/geodlq/geodlq/broker/sqlite"
	"github.com/geodlq/geodlq/classify"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "benchscale:", err)
		os.Exit(1)
	}
}

type options struct {
	bin, store, blobs, work  string
	reps, syncRows, totalCap int
	skip                     string
	purge                    bool
}

func run() error {
	var o options
	flag.StringVar(&o.bin, "geodlq", "geodlq", "the geodlq binary")
	flag.StringVar(&o.store, "store", "", "the filled store's URL")
	flag.StringVar(&o.blobs, "blobs", "", "blob store URL (default a scratch directory)")
	flag.StringVar(&o.work, "work", "", "scratch directory (default a new temporary one)")
	flag.IntVar(&o.reps, "reps", 20, "repetitions of each list page and console request")
	flag.IntVar(&o.totalCap, "total-cap", 1000, "ListOptions.TotalCap of the list pages (as the CLI and console ask; 0: exact totals)")
	flag.IntVar(&o.syncRows, "sync-rows", 200_000, "rows warehouse sync writes (--max-rows; 0: all)")
	flag.StringVar(&o.skip, "skip", "", "comma-separated parts to leave out: stats, list, console, sync, verify")
	flag.BoolVar(&o.purge, "purge", false, "last, purge the older half of the store (by dead-letter time) with its blob collection: destructive")
	flag.Parse()
	if o.store == "" {
		return fmt.Errorf("-store is required")
	}
	if o.work == "" {
		d, err := os.MkdirTemp("", "benchscale")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		o.work = d
	}
	if o.blobs == "" {
		o.blobs = "file://" + filepath.Join(o.work, "blobs")
	}
	skip := map[string]bool{}
	for _, s := range strings.Split(o.skip, ",") {
		skip[s] = true
	}
	ctx := context.Background()
	s, err := broker.OpenStore(ctx, o.store, &broker.OpenOptions{ReadOnly: true, ConnectTimeout: 30 * time.Second})
	if err != nil {
		return err
	}
	defer s.Close()
	p, err := s.List(ctx, broker.ListOptions{Limit: 1, Summaries: true, Total: true, IncludeReplayed: true})
	if err != nil {
		return err
	}
	fmt.Printf("store %s: %d records\n\n", broker.Redact(o.store), p.Total)
	if !skip["stats"] {
		fmt.Println("| command | elapsed | peak RSS |")
		fmt.Println("|---|---:|---:|")
		for i := range 3 {
			el, rss, err := o.cmd(ctx, "stats", "-o", "json")
			if err != nil {
				return err
			}
			fmt.Printf("| `geodlq stats` (run %d) | %s | %s |\n", i+1, dur(el), mib(rss))
		}
		el, rss, err := o.cmd(ctx, "list", "--sort", "-vertices", "--limit", "100", "-o", "wide")
		if err != nil {
			return err
		}
		fmt.Printf("| `geodlq list --sort -vertices --limit 100 -o wide` | %s | %s |\n", dur(el), mib(rss))
		el, rss, err = o.cmd(ctx, "list", "--text", "sudan", "--limit", "100")
		if err != nil {
			return err
		}
		fmt.Printf("| `geodlq list --text sudan --limit 100` | %s | %s |\n\n", dur(el), mib(rss))
	}
	if !skip["list"] {
		if indexed(s) {
			err = o.listPages(ctx, s)
		} else {
			err = o.scanPages(ctx, s)
		}
		if err != nil {
			return err
		}
	}
	if !skip["console"] {
		// A console that cannot answer is a figure of the table, not the
		// end of the run.
		if err := o.console(ctx); err != nil {
			fmt.Printf("console: %v\n\n", err)
		}
	}
	if !skip["sync"] {
		dir := filepath.Join(o.work, "warehouse")
		args := []string{"warehouse", "sync", dir, "--settle", "0s", "-o", "json"}
		if o.syncRows > 0 {
			args = append(args, "--max-rows", fmt.Sprint(o.syncRows))
		}
		el, rss, err := o.cmd(ctx, args...)
		if err != nil {
			return err
		}
		rows := o.syncRows
		if rows == 0 {
			rows = p.Total
		}
		fmt.Printf("| `geodlq warehouse sync --max-rows %d` | %s | %.0f rows/s | %s |\n\n", o.syncRows, dur(el), float64(rows)/el.Seconds(), mib(rss))
	}
	if !skip["verify"] {
		el, rss, err := o.cmd(ctx, "verify", "-o", "json")
		if err != nil {
			return err
		}
		fmt.Printf("| `geodlq verify` | %s | %s |\n\n", dur(el), mib(rss))
	}
	if o.purge {
		return o.purgeHalf(ctx, s)
	}
	return nil
}

// purgeHalf deletes the records dead-lettered before the midpoint of the
// store's dead-letter times (about half of them: dlqgen spreads its times
// evenly), with the blob collection that follows a purge, and reports the
// records deleted, the elapsed time and the peak RSS.
func (o *options) purgeHalf(ctx context.Context, s *broker.Store) error {
	edge := func(desc bool) (time.Time, error) {
		p, err := s.List(ctx, broker.ListOptions{Limit: 1, Summaries: true, IncludeReplayed: true, Sort: broker.SortDeadLetteredAt, Descending: desc})
		if err != nil {
			return time.Time{}, err
		}
		if len(p.Entries) == 0 || p.Entries[0].Summary == nil {
			return time.Time{}, fmt.Errorf("the store is empty")
		}
		return p.Entries[0].Summary.DeadLetteredAt, nil
	}
	first, err := edge(false)
	if err != nil {
		return fmt.Errorf("purge: %w", err)
	}
	last, err := edge(true)
	if err != nil {
		return fmt.Errorf("purge: %w", err)
	}
	mid := first.Add(last.Sub(first) / 2).UTC()
	before, err := s.List(ctx, broker.ListOptions{Limit: 1, Summaries: true, Total: true, IncludeReplayed: true})
	if err != nil {
		return err
	}
	el, rss, err := o.cmd(ctx, "purge", "--older-than", mid.Format(time.RFC3339Nano), "--yes", "--blob-grace", "0s", "-o", "json")
	if err != nil {
		return err
	}
	after, err := s.List(ctx, broker.ListOptions{Limit: 1, Summaries: true, Total: true, IncludeReplayed: true})
	if err != nil {
		return err
	}
	fmt.Printf("| `geodlq purge --older-than %s --yes` (with the blob sweep) | %s | %d of %d records deleted | %s |\n\n",
		mid.Format(time.RFC3339), dur(el), before.Total-after.Total, before.Total, mib(rss))
	return nil
}

// cmd runs geodlq with args on the store and returns its elapsed time and
// peak RSS in bytes.
func (o *options) cmd(ctx context.Context, args ...string) (time.Duration, int64, error) {
	c := exec.CommandContext(ctx, o.bin, append([]string{"--store", o.store, "--blobs", o.blobs}, args...)...)
	c.Stdout = io.Discard
	var stderr strings.Builder
	c.Stderr = &stderr
	t0 := time.Now()
	err := c.Run()
	el := time.Since(t0)
	if err != nil {
		return 0, 0, fmt.Errorf("geodlq %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return el, maxRSS(c.ProcessState), nil
}

// maxRSS is a finished process's peak resident set, in bytes.
func maxRSS(ps *os.ProcessState) int64 {
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		return ru.Maxrss << 10 // KiB on Linux
	}
	return 0
}

// filters are the selections the console and list offer, as timed.
func filters(end time.Time) []struct {
	name string
	f    broker.Filter
} {
	return []struct {
		name string
		f    broker.Filter
	}{
		{"none", broker.Filter{}},
		{"class crs_mismatch", broker.Filter{Classes: []classify.Class{classify.ClassCRSMismatch}}},
		{"reason self_intersection", broker.Filter{ReasonKinds: []classify.ReasonKind{classify.KindSelfIntersection}}},
		{"epsg 3857", broker.Filter{EPSG: []int{3857}}},
		{"source prefix s3://usgs-feed/", broker.Filter{SourcePrefix: "s3://usgs-feed/"}},
		{"source /properties/provider = usgs-feed", broker.Filter{SourcePointer: "/properties/provider", Sources: []string{"usgs-feed"}}},
		{"text sudan", broker.Filter{Text: "sudan"}},
		{"text evt-777777 (one record)", broker.Filter{Text: "evt-777777"}},
		{"since the last day", broker.Filter{Since: end.Add(-24 * time.Hour)}},
	}
}

// listPages times a page of 100 summaries with its total for every filter
// and sort.
func (o *options) listPages(ctx context.Context, s *broker.Store) error {
	last, err := s.List(ctx, broker.ListOptions{Limit: 1, Summaries: true, Sort: broker.SortDeadLetteredAt, Descending: true})
	if err != nil || len(last.Entries) == 0 || last.Entries[0].Summary == nil {
		return fmt.Errorf("finding the newest record: %v", err)
	}
	end := last.Entries[0].Summary.DeadLetteredAt
	fmt.Printf("List page (100 summaries and Page.Total, TotalCap %d), %d runs each: p50 / p95\n\n", o.totalCap, o.reps)
	keys := broker.SortKeys()
	head := "| filter |"
	for _, k := range keys {
		if k == "" {
			k = "written"
		}
		head += " " + string(k) + " |"
	}
	fmt.Println(head + " Total |")
	fmt.Println("|---|" + strings.Repeat("---:|", len(keys)+1))
	for _, f := range filters(end) {
		row := "| " + f.name + " |"
		total := ""
		for _, k := range keys {
			var ts []time.Duration
			for range o.reps {
				t0 := time.Now()
				p, err := s.List(ctx, broker.ListOptions{Filter: f.f, Sort: k, Descending: k != "", Limit: 100, Summaries: true, Total: true,
					TotalCap: o.totalCap})
				if err != nil {
					return fmt.Errorf("list %s by %q: %w", f.name, k, err)
				}
				ts = append(ts, time.Since(t0))
				total = strconv.Itoa(p.Total)
				if p.TotalIsLowerBound {
					total = "≥ " + total
				}
			}
			row += fmt.Sprintf(" %s / %s |", dur(pct(ts, 50)), dur(pct(ts, 95)))
		}
		fmt.Println(row + " " + total + " |")
	}
	fmt.Println()
	return nil
}

// indexed reports whether s's driver sorts, summarises and counts in the
// store (SQLite, PostgreSQL, MySQL); a stream store (Redis, Kafka) lists
// in the written order and the portable Store scans for the rest.
func indexed(s *broker.Store) bool {
	c, ok := s.Driver().(broker.ListCapabler)
	if !ok {
		return false
	}
	caps := c.ListCapabilities()
	return caps.Summaries && caps.Total && len(caps.Sorts) > 0
}

// scanPages times what a stream store's listing is for: a page of 100 in
// the written order for every filter, without a total (a filter the
// store cannot apply is applied as the records are read, so a selective
// one reads far), and the total of the whole store and of one class,
// which read every record. Sorted pages read every record too (the
// portable Store keeps the best 100 as it scans): one is timed, once.
func (o *options) scanPages(ctx context.Context, s *broker.Store) error {
	last, err := s.List(ctx, broker.ListOptions{Limit: 1, Summaries: true, Descending: true})
	if err != nil || len(last.Entries) == 0 || last.Entries[0].Summary == nil {
		return fmt.Errorf("finding the newest record: %v", err)
	}
	end := last.Entries[0].Summary.DeadLetteredAt
	fmt.Printf("List page of a stream store (100 summaries in the written order, no total), %d runs each: p50 / p95\n\n", o.reps)
	fmt.Println("| filter | newest first | oldest first |")
	fmt.Println("|---|---:|---:|")
	for _, f := range filters(end) {
		row := "| " + f.name + " |"
		for _, desc := range []bool{true, false} {
			var ts []time.Duration
			for range o.reps {
				t0 := time.Now()
				if _, err := s.List(ctx, broker.ListOptions{Filter: f.f, Descending: desc, Limit: 100, Summaries: true}); err != nil {
					return fmt.Errorf("list %s: %w", f.name, err)
				}
				ts = append(ts, time.Since(t0))
			}
			row += fmt.Sprintf(" %s / %s |", dur(pct(ts, 50)), dur(pct(ts, 95)))
		}
		fmt.Println(row)
	}
	fmt.Println()
	fmt.Println("| one scan of the whole store | elapsed | result |")
	fmt.Println("|---|---:|---:|")
	for _, c := range []struct {
		name string
		opts broker.ListOptions
	}{
		{"Page.Total, no filter", broker.ListOptions{Limit: 1, Summaries: true, Total: true}},
		{"Page.Total, class crs_mismatch", broker.ListOptions{Limit: 1, Summaries: true, Total: true,
			Filter: broker.Filter{Classes: []classify.Class{classify.ClassCRSMismatch}}}},
		{"a page sorted by -vertex_count", broker.ListOptions{Limit: 100, Summaries: true, Sort: broker.SortVertexCount, Descending: true}},
	} {
		t0 := time.Now()
		p, err := s.List(ctx, c.opts)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		res := fmt.Sprintf("%d records", p.Total)
		if c.opts.Sort != "" {
			res = fmt.Sprintf("%d entries", len(p.Entries))
		}
		fmt.Printf("| %s | %s | %s |\n", c.name, dur(time.Since(t0)), res)
	}
	fmt.Println()
	return nil
}

// console starts geodlq serve and times its first load (the page and the
// requests the page makes first) and /api/records for every filter and
// sort the UI offers.
func (o *options) console(ctx context.Context) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c := exec.CommandContext(ctx, o.bin, "--store", o.store, "--blobs", o.blobs, "serve", "--addr", addr)
	c.Stdout, c.Stderr = io.Discard, io.Discard
	if err := c.Start(); err != nil {
		return err
	}
	defer func() { _ = c.Process.Kill(); _ = c.Wait() }()
	hc := &http.Client{Timeout: 2 * time.Minute}
	get := func(path string) error {
		resp, err := hc.Get("http://" + addr + path)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", path, resp.Status)
		}
		return nil
	}
	up := time.Now()
	for get("/api/config") != nil {
		if time.Since(up) > 2*time.Minute {
			return fmt.Errorf("geodlq serve did not answer within 2 minutes")
		}
		time.Sleep(20 * time.Millisecond)
	}
	fmt.Printf("Console (geodlq serve, up after %s)\n\n", dur(time.Since(up)))
	t0 := time.Now()
	for _, p := range []string{"/", "/api/config", "/api/overview", "/api/records?limit=100", "/api/map"} {
		if err := get(p); err != nil {
			return err
		}
	}
	fmt.Printf("first load (/, config, overview, records, map, one after the other): %s\n\n", dur(time.Since(t0)))
	fmt.Printf("| /api/records (%d runs) | p50 | p95 |\n|---|---:|---:|\n", o.reps)
	for _, q := range []string{"", "class=crs_mismatch", "reason=self_intersection", "q=sudan", "source_prefix=s3://usgs-feed/",
		"sort=-vertex_count", "sort=-geometry_bytes", "sort=-attempts", "sort=-dead_lettered_at", "class=crs_mismatch&sort=-vertex_count", "q=sudan&sort=-vertex_count"} {
		var ts []time.Duration
		for range o.reps {
			v, _ := url.ParseQuery(q)
			v.Set("limit", "100")
			t := time.Now()
			if err := get("/api/records?" + v.Encode()); err != nil {
				return err
			}
			ts = append(ts, time.Since(t))
		}
		name := q
		if name == "" {
			name = "(no filter)"
		}
		fmt.Printf("| `%s` | %s | %s |\n", name, dur(pct(ts, 50)), dur(pct(ts, 95)))
	}
	fmt.Println()
	return nil
}

// pct is the nearest-rank p-th percentile of ts.
func pct(ts []time.Duration, p int) time.Duration {
	s := slices.Clone(ts)
	slices.Sort(s)
	i := (p*len(s)+99)/100 - 1
	return s[max(0, min(i, len(s)-1))]
}

func dur(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000)
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }
