// Package dlqgen makes realistic dead letters in bulk, fast: for the
// scale benchmarks (make bench-scale), the memory tests and anyone who
// wants a store of a million records to try a command on.
//
// A [Generator] first builds a set of templates: polygons and lines of 4
// to 20,000 vertices around cities of every continent, each corrupted the
// ways real feeds are (crossing edges, unclosed rings, too few points,
// NaN coordinates, EPSG:3857 metres, metres declared as degrees, no
// geometry, an unparseable CRS) or valid but failing downstream
// (transient errors, a resource limit), each checked once by
// spatial.Checker so that every reason is the one GEOS gives. Then
// [Generator.Message] makes the i-th dead letter from template i mod K: a
// GeoJSON Feature with its own event id, idempotency key, properties (a
// country name, a provider, a batch), source URI, attempts and
// dead-letter time, wrapped by envelope.Builder exactly as a Processor
// does. Message is deterministic in i, so that a store can be filled by
// several workers, or in several runs, and two stores filled alike.
//
// [Fill] writes n of them through the store's fastest honest write path:
// [broker.Store.PublishBatch] (one transaction or pipeline per batch, for
// the stores that batch) from a few workers.
package dlqgen

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/offload"
	"github.com/geodlq/geodlq/spatial"
	"github.com/geodlq/geodlq/spatial/proj"
)

// Options configures [New]. The zero value and nil are valid.
type Options struct {
	// Seed varies the records; the same seed makes the same records.
	// Default 1.
	Seed uint64
	// Start is the earliest dead-letter time. Default 2026-01-01 UTC.
	Start time.Time
	// Span spreads the dead-letter times over [Start, Start+Span), in
	// record order. Default 30 days.
	Span time.Duration
	// Offloader, when set, offloads the geometries over its threshold, as
	// a Processor configured with it does (the large templates then share
	// a few blobs). Nil: every geometry is inline.
	Offloader *offload.Offloader
}

// Generator makes dead letters. It is safe for concurrent use.
type Generator struct {
	o         Options
	templates []template
	builders  sync.Pool
}

// template is a checked geometry and the failure it gives.
type template struct {
	geometry string // the "geometry" member's JSON value, or "" for none
	crs      string // the "crs" member's JSON value, or ""
	err      error  // the failure recorded for every event made from it
}

// countries name the events' properties.name, in turn (Natural Earth
// admin-0 names).
var countries = []string{"Sudan", "South Sudan", "Chad", "Niger", "Mali", "Canada", "Russia", "Fiji", "Kiribati",
	"New Zealand", "Chile", "Peru", "Brazil", "Norway", "Indonesia", "Philippines", "Japan", "Mexico", "Egypt",
	"Kenya", "Madagascar", "Australia", "Greenland", "Iceland", "India", "China", "Mongolia", "Kazakhstan",
	"Antarctica", "United States of America", "Argentina", "Papua New Guinea", "Tanzania", "Ethiopia", "Somalia"}

// providers are the events' data providers: properties.provider and the
// bucket of their source_uri; weighted, the first the most common.
var providers = []string{"provider-a", "provider-a", "provider-a", "osm-extracts", "osm-extracts", "ign-export",
	"usgs-feed", "provider-b"}

// cities are the templates' centres (lon, lat).
var cities = [][2]float64{{32.53, 15.59}, {-75.70, 45.42}, {177.0, 64.7}, {178.44, -18.14}, {-70.65, -33.45},
	{2.35, 48.86}, {139.69, 35.69}, {-99.13, 19.43}, {151.21, -33.87}, {-21.94, 64.15}, {77.21, 28.61}, {-179.5, 51.8}}

// vertexCounts are the templates' sizes; the weights keep most events
// small, as real dead letters are.
var vertexCounts = []struct{ n, weight int }{{5, 45}, {8, 15}, {12, 12}, {20, 10}, {50, 8}, {100, 5},
	{250, 3}, {1000, 1}}

// bigTemplates are the few templates of 5,000 and 20,000 vertices (about
// 120 and 480 KB), each in one city: one event in 600 and one in 1,200.
var bigTemplates = []struct{ n, city int }{{5000, 2}, {5000, 7}, {20000, 11}}

// New builds a generator: its templates are checked here, once.
func New(opts *Options) (*Generator, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Start.IsZero() {
		o.Start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	if o.Span <= 0 {
		o.Span = 30 * 24 * time.Hour
	}
	// PROJ, where linked, words the verdict of the PROJ-string corruption
	// as a consumer built with it would; without cgo the checker is pure
	// Go.
	var copts spatial.Options
	switch p, err := proj.New(nil); {
	case err == nil:
		defer p.Close()
		copts.ResolveCRS = p.ResolveCRS
	case !errors.Is(err, spatial.ErrNeedsCGO):
		return nil, err
	}
	chk, err := spatial.NewChecker(&copts)
	if err != nil {
		return nil, err
	}
	defer chk.Close()
	g := &Generator{o: o}
	rng := rand.New(rand.NewPCG(o.Seed, 0x6765646c71))
	for ci, c := range cities {
		for _, vc := range vertexCounts {
			for range vc.weight {
				kind := rng.IntN(len(corruptions))
				t, err := makeTemplate(chk, c, vc.n, corruptions[kind], ci)
				if err != nil {
					return nil, err
				}
				g.templates = append(g.templates, t)
			}
		}
	}
	for _, bt := range bigTemplates {
		t, err := makeTemplate(chk, cities[bt.city], bt.n, "bowtie", bt.city)
		if err != nil {
			return nil, err
		}
		g.templates = append(g.templates, t)
	}
	rng.Shuffle(len(g.templates), func(i, j int) { g.templates[i], g.templates[j] = g.templates[j], g.templates[i] })
	return g, nil
}

// Templates returns how many templates the generator cycles through.
func (g *Generator) Templates() int { return len(g.templates) }

// corruptions are what a template does to its shape.
var corruptions = []string{"bowtie", "bowtie", "bowtie", "unclosed", "too_few", "nan", "crs_3857", "metres_as_4326",
	"no_geometry", "bad_crs", "transient", "transient", "resource"}

// ring returns n positions on a rough circle of radius r degrees around
// c, closed (the last equals the first).
func ring(c [2]float64, n int, r float64) [][2]float64 {
	pts := make([][2]float64, 0, n)
	for i := range n - 1 {
		a := 2 * math.Pi * float64(i) / float64(n-1)
		// A little irregular, as digitised coastlines are.
		rr := r * (1 + 0.15*math.Sin(7*a))
		pts = append(pts, [2]float64{c[0] + rr*math.Cos(a), c[1] + rr*0.7*math.Sin(a)})
	}
	return append(pts, pts[0])
}

func appendPositions(b *strings.Builder, pts [][2]float64, merc bool) {
	b.WriteByte('[')
	for i, p := range pts {
		if i > 0 {
			b.WriteByte(',')
		}
		x, y := p[0], p[1]
		if merc {
			x = x * 20037508.342789244 / 180
			y = math.Log(math.Tan((90+y)*math.Pi/360)) * 20037508.342789244 / math.Pi
		}
		b.WriteByte('[')
		b.WriteString(strconv.FormatFloat(x, 'f', 6, 64))
		b.WriteByte(',')
		b.WriteString(strconv.FormatFloat(y, 'f', 6, 64))
		b.WriteByte(']')
	}
	b.WriteByte(']')
}

// makeTemplate builds one template and checks it.
func makeTemplate(chk *spatial.Checker, c [2]float64, n int, corruption string, ci int) (template, error) {
	r := 0.05 + 0.002*math.Sqrt(float64(n))
	if c[0]+r > 180 {
		c[0] = 180 - r - 0.01
	}
	pts := ring(c, max(n, 5), r)
	var t template
	var b strings.Builder
	polygon := func(pts [][2]float64, merc bool) {
		b.WriteString(`{"type":"Polygon","coordinates":[`)
		appendPositions(&b, pts, merc)
		b.WriteString(`]}`)
	}
	switch corruption {
	case "bowtie":
		k := len(pts) / 2
		pts[1], pts[k] = pts[k], pts[1]
		polygon(pts, false)
	case "unclosed":
		polygon(pts[:len(pts)-1], false)
	case "too_few":
		b.WriteString(`{"type":"LineString","coordinates":`)
		appendPositions(&b, pts[:1], false)
		b.WriteString(`}`)
	case "nan":
		polygon(pts, false)
		t.geometry = strings.Replace(b.String(), `[[[`+strconv.FormatFloat(pts[0][0], 'f', 6, 64)+`,`, `[[[NaN,`, 1)
	case "crs_3857":
		polygon(pts, true)
		t.crs = `"EPSG:3857"`
	case "metres_as_4326":
		polygon(pts, true)
		t.crs = `"EPSG:4326"`
	case "no_geometry":
		t.geometry = "null"
	case "bad_crs":
		polygon(pts, false)
		t.crs = `"+proj=not-a-projection +units=furlongs"`
	default: // transient, resource: valid geometries failing later
		polygon(pts, false)
	}
	if t.geometry == "" {
		t.geometry = b.String()
	}
	payload := `{"type":"Feature","id":"template","properties":{}`
	if t.crs != "" {
		payload += `,"crs":` + t.crs
	}
	payload += `,"geometry":` + t.geometry + `}`
	_, err := chk.CheckEvent([]byte(payload))
	switch corruption {
	case "transient":
		if err == nil {
			err = classify.Transient(fmt.Errorf("tile server %d: 503 Service Unavailable", ci))
		}
	case "resource":
		if err == nil {
			err = classify.ResourceExhausted(errors.New("spatial join: 2 GiB memory budget exceeded"))
		}
	}
	if err == nil {
		return t, fmt.Errorf("dlqgen: template %q of %d vertices passed the check", corruption, n)
	}
	t.err = err
	return t, nil
}

// payload is the i-th event: template t's geometry in a Feature of its own.
func (g *Generator) payload(i int, t *template, h uint64) []byte {
	country := countries[h%uint64(len(countries))]
	prov := providers[(h>>8)%uint64(len(providers))]
	batch := i / 5000
	at := g.at(i)
	var b strings.Builder
	b.Grow(len(t.geometry) + 320)
	b.WriteString(`{"type":"Feature","event_id":"evt-`)
	b.WriteString(strconv.Itoa(i))
	b.WriteString(`","source_uri":"s3://`)
	b.WriteString(prov)
	b.WriteString(at.Format("/2006/01/02/"))
	b.WriteString("batch-" + strconv.Itoa(batch) + ".geojson")
	b.WriteString(`","properties":{"name":"`)
	b.WriteString(country)
	b.WriteString(`","provider":"`)
	b.WriteString(prov)
	b.WriteString(`","admin_level":`)
	b.WriteString(strconv.Itoa(int(h>>16) % 10))
	b.WriteString(`,"batch":"b-` + strconv.Itoa(batch) + `"}`)
	if t.crs != "" {
		b.WriteString(`,"crs":`)
		b.WriteString(t.crs)
	}
	b.WriteString(`,"geometry":`)
	b.WriteString(t.geometry)
	b.WriteByte('}')
	return []byte(b.String())
}

// at is the i-th record's dead-letter time: the span is walked in about a
// million steps, so that the records of any run are spread over it.
func (g *Generator) at(i int) time.Time {
	step := g.o.Span / (1 << 20)
	return g.o.Start.Add(time.Duration(i%(1<<20)) * step).Add(time.Duration(i/(1<<20)) * time.Millisecond)
}

func mix(i int, seed uint64) uint64 {
	x := uint64(i)*0x9E3779B97F4A7C15 + seed
	x ^= x >> 30
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 27
	x *= 0x94D049BB133111EB
	return x ^ (x >> 31)
}

type builder struct {
	b   *envelope.Builder
	now time.Time
}

func (g *Generator) builder() (*builder, error) {
	if b, ok := g.builders.Get().(*builder); ok {
		return b, nil
	}
	bb := &builder{}
	eb, err := envelope.NewBuilder(&envelope.BuilderOptions{Offloader: g.o.Offloader, Now: func() time.Time { return bb.now }})
	if err != nil {
		return nil, err
	}
	bb.b = eb
	return bb, nil
}

// Message returns the i-th dead letter: its envelope as the body (and as
// Message.Envelope), its dead-letter headers and its ordering key.
func (g *Generator) Message(ctx context.Context, i int) (*broker.Message, error) {
	h := mix(i, g.o.Seed)
	t := &g.templates[h%uint64(len(g.templates))]
	return g.build(ctx, i, h, g.payload(i, t, h), t.err)
}

func (g *Generator) build(ctx context.Context, i int, h uint64, payload []byte, failure error) (*broker.Message, error) {
	b, err := g.builder()
	if err != nil {
		return nil, err
	}
	defer g.builders.Put(b)
	b.now = g.at(i)
	attempts := 1 + int(h>>40)%3
	if classify.Classify(failure) == classify.ClassTransient {
		attempts = 3 + int(h>>40)%7
	}
	part, off := int32(h%12), int64(i)
	env, body, err := b.b.Build(ctx, envelope.Input{Payload: payload, IdempotencyKey: "idem:gen:" + strconv.Itoa(i), Err: failure,
		Attempts: attempts, FirstSeenAt: b.now.Add(-time.Duration(attempts) * 2 * time.Second),
		Source: &envelope.Source{System: "kafka", Topic: "spatial.events", Partition: &part, Offset: &off, Key: []byte("parcel-" + strconv.Itoa(i%997))}})
	if err != nil {
		return nil, fmt.Errorf("dlqgen: record %d: %w", i, err)
	}
	return &broker.Message{Key: env.Source.Key, Body: body, Headers: broker.Headers(env), Envelope: env}, nil
}

// Large returns the i-th large dead letter: an event whose geometry, a
// polygon with crossing edges, takes about geometryBytes bytes (the
// envelope about twice that, the raw payload holding it too, unless the
// generator offloads it).
func (g *Generator) Large(ctx context.Context, i, geometryBytes int) (*broker.Message, error) {
	n := max(geometryBytes/22, 8)
	pts := ring(cities[i%len(cities)], n, 5)
	k := len(pts) / 2
	pts[1], pts[k] = pts[k], pts[1]
	var b strings.Builder
	b.Grow(geometryBytes + 256)
	b.WriteString(`{"type":"Feature","event_id":"evt-large-` + strconv.Itoa(i) + `","source_uri":"s3://provider-b/large/` +
		strconv.Itoa(i) + `.geojson","properties":{"name":"` + countries[i%len(countries)] + `","provider":"provider-b"},"geometry":{"type":"Polygon","coordinates":[`)
	appendPositions(&b, pts, false)
	b.WriteString(`]}}`)
	failure := classify.InvalidGeometry(errors.New("Self-intersection"))
	return g.build(ctx, 1<<40+i, mix(i, g.o.Seed), []byte(b.String()), failure)
}

// FillOptions configures [Fill]. The zero value and nil are valid.
type FillOptions struct {
	// From is the index of the first record. Default 0.
	From int
	// Batch is the number of records per PublishBatch. Default 500.
	Batch int
	// Workers is how many batches are built and written at once. Default 4.
	Workers int
	// Progress, when set, is called with the number of records written so
	// far, after every batch.
	Progress func(written int)
}

// Fill writes n records (From to From+n-1) of g to destination of s.
func Fill(ctx context.Context, s *broker.Store, destination string, g *Generator, n int, opts *FillOptions) error {
	var o FillOptions
	if opts != nil {
		o = *opts
	}
	if o.Batch <= 0 {
		o.Batch = 500
	}
	o.Batch = min(o.Batch, broker.MaxBatch)
	if o.Workers <= 0 {
		o.Workers = 4
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next, written atomic.Int64
	var wg sync.WaitGroup
	for range o.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msgs := make([]*broker.Message, 0, o.Batch)
			for ctx.Err() == nil {
				start := int(next.Add(int64(o.Batch))) - o.Batch
				if start >= n {
					return
				}
				msgs = msgs[:0]
				for i := start; i < min(start+o.Batch, n); i++ {
					m, err := g.Message(ctx, o.From+i)
					if err != nil {
						cancel(err)
						return
					}
					msgs = append(msgs, m)
				}
				if err := s.PublishBatch(ctx, destination, msgs); err != nil {
					cancel(fmt.Errorf("dlqgen: writing records %d to %d: %w", o.From+start, o.From+start+len(msgs)-1, err))
					return
				}
				w := written.Add(int64(len(msgs)))
				if o.Progress != nil {
					o.Progress(int(w))
				}
			}
		}()
	}
	wg.Wait()
	return context.Cause(ctx)
}
