package probe

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/geodlq/geodlq/broker"
	_ "github.com/geodlq/geodlq/broker/mysql"
	_ "github.com/geodlq/geodlq/broker/postgis"
	_ "github.com/geodlq/geodlq/broker/sqlite"
	"github.com/geodlq/geodlq/classify"
)

func TestProbe(t *testing.T) {
	url := os.Getenv("PROBE_STORE")
	if url == "" {
		t.Skip("PROBE_STORE")
	}
	ctx := context.Background()
	s, err := broker.OpenStore(ctx, url, &broker.OpenOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	time1 := func(name string, fn func() error) {
		t0 := time.Now()
		err := fn()
		t.Logf("%-40s %8.1f ms %v", name, float64(time.Since(t0).Microseconds())/1000, err)
	}
	time1("stats", func() error { _, err := s.Stats(ctx, broker.StatsOptions{}); return err })
	time1("stats by source depth 1", func() error {
		_, err := s.Stats(ctx, broker.StatsOptions{BySource: true, SourceDepth: 1, Bucket: 24 * time.Hour})
		return err
	})
	time1("stats by provider", func() error {
		_, err := s.Stats(ctx, broker.StatsOptions{BySource: true, Filter: broker.Filter{SourcePointer: "/properties/provider"}})
		return err
	})
	for _, f := range []broker.Filter{{}, {Classes: []classify.Class{classify.ClassCRSMismatch}}, {Text: "sudan"}, {Text: "zz-none"},
		{Text: "evt-77777"}, {SourcePrefix: "s3://usgs-feed/"}, {Since: time.Date(2026, 1, 10, 0, 0, 0, 0, time.UTC)}} {
		for _, k := range broker.SortKeys() {
			for _, desc := range []bool{true} {
				time1("list "+string(k)+" "+f.Text+f.SourcePrefix+string(classOf(f)), func() error {
					p, err := s.List(ctx, broker.ListOptions{Filter: f, Sort: k, Descending: desc, Limit: 100, Summaries: true, Total: true})
					t.Logf("   total %d, %d entries", p.Total, len(p.Entries))
					return err
				})
			}
		}
	}
}

func classOf(f broker.Filter) classify.Class {
	if len(f.Classes) > 0 {
		return f.Classes[0]
	}
	return ""
}
