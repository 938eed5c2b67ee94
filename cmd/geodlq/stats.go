package main

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/geodlq/geodlq/broker"
)

// statsReport is what stats writes with --json. Field names are stable.
type statsReport struct {
	Total          int            `json:"total"`
	ByDestination  map[string]int `json:"by_destination"`
	ByStatus       map[string]int `json:"by_status"`
	ByClass        map[string]int `json:"by_class"`
	ByStage        map[string]int `json:"by_stage"`
	ByEPSG         map[string]int `json:"by_epsg"`
	ByReasonKind   map[string]int `json:"by_reason_kind"`
	BySourcePrefix map[string]int `json:"by_source_prefix"`
	Bucket         string         `json:"bucket,omitempty"`
	Buckets        []statsBucket  `json:"buckets,omitempty"`
}

type statsBucket struct {
	Start   string         `json:"start"`
	Total   int            `json:"total"`
	ByClass map[string]int `json:"by_class"`
}

func newStatsCmd(a *app) *cobra.Command {
	var f filterFlags
	var depth int
	var bucket string
	var out *output
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Count dead-lettered events by class, stage, EPSG, reason kind, source prefix and time",
		Long: `stats counts the selected envelopes (pending ones; replayed too with --all) by
destination, status, failure class, failed stage, EPSG code, reason kind and
source prefix — the event's source (its source_uri, or the member
--source-pointer names, such as /properties/provider) cut after --prefix-depth
parts (1: the scheme and host, "s3://provider-b"; 2: one path segment more;
a value without "://" is cut at "/"), which is how the managed-queue design
aggregates failures by provider — and, with --bucket, by class over time
buckets of that width. The store counts: SQLite and PostGIS keep counts as
records are written, so stats takes the same time at a million records as at
a thousand (with --bucket, --since, --until, --bbox, --text or another
--source-pointer they group the records' indexed columns instead).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			if err := out.resolve(a, cmd); err != nil {
				return err
			}
			sel, err := f.parse(cmd, time.Now())
			if err != nil {
				return err
			}
			if depth < 1 {
				return usageFor(cmd, "--prefix-depth must be at least 1")
			}
			var width time.Duration
			if bucket != "" {
				if width, err = parseDuration(bucket); err != nil || width <= 0 {
					return usageFor(cmd, "--bucket %q: want a positive duration such as 1h or 1d", bucket)
				}
			}
			ctx := cmd.Context()
			s, err := a.openStore(ctx, readOnly)
			if err != nil {
				return err
			}
			defer closeWith(&err, s)
			rep := statsReport{ByDestination: map[string]int{}, ByStatus: map[string]int{}, ByClass: map[string]int{},
				ByStage: map[string]int{}, ByEPSG: map[string]int{}, ByReasonKind: map[string]int{}, BySourcePrefix: map[string]int{}}
			buckets := map[int64]*statsBucket{}
			dests, err := a.destinations(ctx, s)
			if err != nil {
				return err
			}
			// The store counts (an aggregate, or counts it keeps): no
			// record is read here.
			for _, d := range dests {
				cs, err := s.Stats(ctx, broker.StatsOptions{Destination: d, Filter: sel.filter, BySource: true, SourceDepth: depth})
				if err != nil {
					return fmt.Errorf("counting %q: %w", d, cannotList(s, err))
				}
				for _, c := range cs {
					if c.Class == "" { // not an envelope
						continue
					}
					n := c.Pending + c.Leased
					if sel.replayed {
						n += c.Replayed
						rep.ByStatus[string(broker.StatusReplayed)] += c.Replayed
					}
					if n == 0 {
						continue
					}
					rep.ByStatus[string(broker.StatusPending)] += c.Pending
					rep.ByStatus[string(broker.StatusLeased)] += c.Leased
					rep.Total += n
					rep.ByDestination[c.Destination] += n
					rep.ByClass[c.Class.String()] += n
					rep.ByStage[c.Stage.String()] += n
					rep.ByEPSG[epsgLabel(c.EPSG)] += n
					rep.ByReasonKind[orDash(string(c.ReasonKind))] += n
					rep.BySourcePrefix[sourcePrefix(c.Source, depth)] += n
				}
				if width <= 0 {
					continue
				}
				bs, err := s.Stats(ctx, broker.StatsOptions{Destination: d, Filter: sel.filter, Bucket: width})
				if err != nil {
					return fmt.Errorf("counting %q: %w", d, cannotList(s, err))
				}
				for _, c := range bs {
					n := c.Pending + c.Leased
					if sel.replayed {
						n += c.Replayed
					}
					if c.Class == "" || n == 0 {
						continue
					}
					b := buckets[c.Bucket.UnixNano()]
					if b == nil {
						b = &statsBucket{Start: stamp(c.Bucket), ByClass: map[string]int{}}
						buckets[c.Bucket.UnixNano()] = b
					}
					b.Total += n
					b.ByClass[c.Class.String()] += n
				}
			}
			for k, v := range rep.ByStatus {
				if v == 0 {
					delete(rep.ByStatus, k)
				}
			}
			if width > 0 {
				rep.Bucket = bucket
				keys := make([]int64, 0, len(buckets))
				for k := range buckets {
					keys = append(keys, k)
				}
				sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
				for _, k := range keys {
					rep.Buckets = append(rep.Buckets, *buckets[k])
				}
			}
			if out.json() {
				return writeJSON(a.stdout, rep)
			}
			return a.statsText(out, rep)
		},
	}
	f.register(cmd.Flags(), true)
	cmd.Flags().IntVar(&depth, "prefix-depth", 1, "parts of source_uri to group by (1: scheme://host)")
	cmd.Flags().StringVar(&bucket, "bucket", "", "also count by class over time buckets of this width (1h, 1d)")
	out = addOutput(cmd, fmtTable, fmtWide, fmtJSON)
	return cmd
}

// sourcePrefix cuts uri after depth parts: the first is scheme://host,
// each further one a path segment. No source_uri is "(none)".
func sourcePrefix(uri string, depth int) string {
	if uri == "" {
		return "(none)"
	}
	scheme, rest, ok := strings.Cut(uri, "://")
	if !ok {
		rest = uri // a value that is not a URI: parts are "/"-separated
	}
	parts := strings.Split(rest, "/")
	if len(parts) > depth {
		parts = parts[:depth]
	}
	p := strings.Join(parts, "/")
	if ok {
		p = scheme + "://" + p
	}
	return p
}

func (a *app) statsText(o *output, rep statsReport) error {
	fmt.Fprintf(a.stdout, "%d envelopes\n", rep.Total)
	for _, sec := range []struct {
		title string
		m     map[string]int
	}{
		{"DESTINATION", rep.ByDestination}, {"STATUS", rep.ByStatus}, {"CLASS", rep.ByClass}, {"STAGE", rep.ByStage},
		{"EPSG", rep.ByEPSG}, {"REASON KIND", rep.ByReasonKind}, {"SOURCE PREFIX", rep.BySourcePrefix},
	} {
		if len(sec.m) == 0 {
			continue
		}
		fmt.Fprintln(a.stdout)
		if err := a.table(o, []string{sec.title, "COUNT"}, countRows(sec.m), 0); err != nil {
			return err
		}
	}
	if len(rep.Buckets) > 0 {
		classes := map[string]bool{}
		for _, b := range rep.Buckets {
			for c := range b.ByClass {
				classes[c] = true
			}
		}
		cs := make([]string, 0, len(classes))
		for c := range classes {
			cs = append(cs, c)
		}
		sort.Strings(cs)
		header := append([]string{"BUCKET (" + rep.Bucket + ")", "TOTAL"}, upper(cs)...)
		var rows [][]string
		for _, b := range rep.Buckets {
			row := []string{shortTime(b.Start), strconv.Itoa(b.Total)}
			for _, c := range cs {
				row = append(row, strconv.Itoa(b.ByClass[c]))
			}
			rows = append(rows, row)
		}
		fmt.Fprintln(a.stdout)
		return a.table(o, header, rows)
	}
	return nil
}

// countRows sorts a count map by count, descending, then by key.
func countRows(m map[string]int) [][]string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	rows := make([][]string, len(keys))
	for i, k := range keys {
		rows[i] = []string{k, strconv.Itoa(m[k])}
	}
	return rows
}

func upper(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strings.ToUpper(s)
	}
	return out
}
