package main

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/triage"
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
source-URI prefix — the payload's source_uri cut after --prefix-depth parts
(1: the scheme and host, "s3://provider-b"; 2: one path segment more), which is
how the managed-queue design aggregates failures by provider — and, with
--bucket, by class over time buckets of that width.`,
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
			err = a.eachRecord(ctx, s, sel, func(it item) error {
				e := it.env
				if e == nil {
					return nil
				}
				rep.Total++
				rep.ByDestination[it.Record.Destination]++
				rep.ByStatus[orDash(string(it.Status))]++
				rep.ByClass[e.FailureClass.String()]++
				rep.ByStage[e.FailedStage.String()]++
				rep.ByEPSG[epsgLabel(broker.EPSGOf(e))]++
				kind := "-"
				if e.GeometryError != nil && e.GeometryError.Kind != "" {
					kind = e.GeometryError.Kind
				}
				rep.ByReasonKind[kind]++
				rep.BySourcePrefix[sourcePrefix(triage.SourceURI(e), depth)]++
				if width > 0 {
					start := e.DeadLetteredAt.Truncate(width)
					b := buckets[start.UnixNano()]
					if b == nil {
						b = &statsBucket{Start: stamp(start), ByClass: map[string]int{}}
						buckets[start.UnixNano()] = b
					}
					b.Total++
					b.ByClass[e.FailureClass.String()]++
				}
				return nil
			})
			if err != nil {
				return err
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
