//go:build cgo

package spatial_test

import (
	"testing"

	"github.com/geodlq/geodlq/internal/corpus"
	"github.com/geodlq/geodlq/spatial"
)

var (
	benchBowtie = []byte(`{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}`)
	benchValid  = []byte(`{"type":"Polygon","coordinates":[[[13.37,52.51],[13.38,52.51],[13.38,52.52],[13.37,52.52],[13.37,52.51]]]}`)
)

// BenchmarkCheckGeometry checks a small invalid polygon (the bowtie), the
// consumer's per-event cost on the failure path.
func BenchmarkCheckGeometry(b *testing.B) {
	c := newChecker(b, nil)
	b.Run("bowtie", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if c.CheckGeometry(benchBowtie) == nil {
				b.Fatal("bowtie passed")
			}
		}
	})
	b.Run("valid", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := c.CheckGeometry(benchValid); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkCheckEvent checks whole small events (cached CRS).
func BenchmarkCheckEvent(b *testing.B) {
	c := newChecker(b, nil)
	for _, name := range []string{"valid_polygon", "bowtie", "crs84_urn", "webmercator_labelled_4326", "epsg_3857_declared"} {
		it, ok := corpus.Lookup(name)
		if !ok {
			b.Fatal(name)
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(it.Payload)))
			for b.Loop() {
				_, _ = c.CheckEvent(it.Payload)
			}
		})
	}
}

// BenchmarkCheckEventParallel checks every corpus event from as many
// goroutines as -cpu says, sharing one Checker: run with -cpu 1,2 (or
// more) to see how it scales with cores.
func BenchmarkCheckEventParallel(b *testing.B) {
	c := newChecker(b, nil)
	items := corpus.All()
	var size int64
	for _, it := range items {
		size += int64(len(it.Payload))
	}
	b.ReportAllocs()
	b.SetBytes(size / int64(len(items)))
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			_, _ = c.CheckEvent(items[i%len(items)].Payload)
			i++
		}
	})
}

// BenchmarkCheckEventLarge checks a valid multi-megabyte MultiPolygon
// event; -benchtime=1x is enough.
func BenchmarkCheckEventLarge(b *testing.B) {
	for _, size := range []int{4 << 20, 40 << 20} {
		payload := corpus.LargeEvent(size)
		b.Run(byteSize(size), func(b *testing.B) {
			c := newChecker(b, nil)
			b.SetBytes(int64(len(payload)))
			for b.Loop() {
				if _, err := c.CheckEvent(payload); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func byteSize(n int) string {
	if n >= 1<<20 {
		return itoa(n>>20) + "MiB"
	}
	return itoa(n>>10) + "KiB"
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

// BenchmarkResolveEPSGCached is the per-event CRS cost once a definition
// has been seen: a read-locked map lookup, not a PROJ call.
func BenchmarkResolveEPSGCached(b *testing.B) {
	c := newChecker(b, nil)
	for _, crs := range []string{"EPSG:4326", "urn:ogc:def:crs:OGC:1.3:CRS84", "EPSG:43x6"} {
		_, _ = c.ResolveEPSG(crs)
		b.Run(crs, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = c.ResolveEPSG(crs)
			}
		})
	}
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_, _ = c.ResolveEPSG("EPSG:4326")
			}
		})
	})
}

// BenchmarkResolveEPSGUncached is the PROJ cost the cache saves.
func BenchmarkResolveEPSGUncached(b *testing.B) {
	for _, crs := range []string{"EPSG:4326", "OGC:CRS84", "+proj=longlat +datum=WGS84 +type=crs", "EPSG:43x6"} {
		b.Run(crs, func(b *testing.B) {
			c := newChecker(b, &spatial.Options{CRSCacheSize: 1})
			for b.Loop() {
				c.ClearCRSCache()
				_, _ = c.ResolveEPSG(crs)
			}
		})
	}
}

func BenchmarkReproject(b *testing.B) {
	c := newChecker(b, nil)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Reproject(benchValid, 4326, 3857); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMakeValid(b *testing.B) {
	c := newChecker(b, nil)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := c.MakeValid(benchBowtie); err != nil {
			b.Fatal(err)
		}
	}
}
