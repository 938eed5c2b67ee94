package console

import (
	"context"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/paulmach/orb"
	"github.com/paulmach/orb/planar"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/internal/geojson"
	"github.com/geodlq/geodlq/offload"
)

// The console holds nothing per record of the store: every answer is read
// from the store when asked (lists and counts by the store's own indexes,
// Store.List with summaries and Store.Stats), so its memory does not grow
// with the store. The map places the newest matching records, at most
// maxMapRecords of them per request (the answer says when there are
// more): a record is drawn at its fault location, which its summary
// carries, else at its geometry's centroid, computed from its body the
// first time and kept in a bounded cache (placeCache).

// maxMapRecords bounds the records one map or shapes request places: the
// newest that match the filters. The answer's Capped says when more
// match (narrow the filters, or zoom in with a box filter).
const maxMapRecords = 5_000

// mapPage is the page size the map reads summaries in.
const mapPage = broker.MaxListLimit

// placeBodyBytes bounds the bodies one read of records to place holds.
const placeBodyBytes = 8 << 20

type recKey struct{ dest, id string }

// placed is a record the map draws, or says why it does not.
type placed struct {
	dest, id string
	eventID  string
	class    string
	kind     string
	// lon, lat is where the record is drawn (EPSG:4326); located says
	// from what: "fault", "centroid", or "" (not drawn; why says why).
	lon, lat    float64
	located     string
	reprojected int // the EPSG code the point was reprojected from, or 0
	why         string
}

// place is where a record is drawn (the cached part of placed).
type place struct {
	lon, lat    float64
	located     string
	reprojected int
	why         string
}

// placeCache keeps the places computed from bodies (centroids), at most
// max, the oldest dropped first.
type placeCache struct {
	mu   sync.Mutex
	max  int
	m    map[recKey]place
	ring []recKey
	next int
}

// placeCacheEntries bounds the places kept (about 150 bytes each).
const placeCacheEntries = 50_000

func newPlaceCache(n int) *placeCache {
	return &placeCache{max: n, m: make(map[recKey]place)}
}

func (c *placeCache) get(k recKey) (place, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.m[k]
	return p, ok
}

func (c *placeCache) put(k recKey, p place) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[k]; ok {
		c.m[k] = p
		return
	}
	if len(c.ring) < c.max {
		c.ring = append(c.ring, k)
	} else {
		delete(c.m, c.ring[c.next])
		c.ring[c.next] = k
		c.next = (c.next + 1) % c.max
	}
	c.m[k] = p
}

// forget drops the places of records that left (replayed, discarded).
func (c *placeCache) forget(keys []recKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range keys {
		delete(c.m, k) // its ring slot is reused in turn
	}
}

// forget drops what the console keeps of records that left.
func (s *Server) forget(keys []recKey) {
	if len(keys) == 0 {
		return
	}
	s.places.forget(keys)
	s.shapeCache.forget(keys)
}

// reinjected reports whether a record is an event a replay re-injected,
// not a dead letter.
func reinjected(r *broker.Record) bool {
	return r.Message != nil && r.Message.Header(broker.HeaderReplayOf) != ""
}

// maxCentroidVertices bounds the geometries the console computes a planar
// centroid of; larger ones (up to the display budget) are placed at the
// mean of their positions, which is cheaper.
const maxCentroidVertices = 200_000

// storeFilter is the selection as the store applies it, the text and
// source-prefix filters included.
func (sel selection) storeFilter() broker.Filter {
	f := sel.filter
	f.Text, f.SourcePrefix = sel.q.Text, sel.q.SourcePrefix
	return f
}

// sample reads the newest records matching sel (open ones only), at most
// maxMapRecords, and places them. capped says more match.
func (s *Server) sample(ctx context.Context, sel selection) (recs []placed, capped bool, err error) {
	lo := broker.ListOptions{Destination: sel.q.Destination, Filter: sel.storeFilter(), Descending: true, Limit: mapPage, Summaries: true}
	var need []int // indexes into recs placed from bodies
	for {
		p, err := s.store.List(ctx, lo)
		if err != nil {
			return nil, false, err
		}
		for _, e := range p.Entries {
			if e.Record == nil || e.Summary == nil || e.Summary.ReplayOf != "" || (!e.Summary.Envelope && sel.envelopeOnly()) {
				continue
			}
			if len(recs) == maxMapRecords {
				capped = true
				break
			}
			sm := e.Summary
			pl := placed{dest: e.Record.Destination, id: e.Record.ID}
			if !sm.Envelope {
				pl.why = "not a dlq.v1 envelope"
				recs = append(recs, pl)
				continue
			}
			pl.eventID, pl.class, pl.kind = sm.EventID, string(sm.Class), string(sm.ReasonKind)
			if len(sm.Location) == 2 && sm.EPSG != 0 {
				// The fault location: no body needed.
				// The fault location: no body needed (reprojected ones
				// are cached: PROJ is asked once).
				k := recKey{pl.dest, pl.id}
				c, ok := place{}, false
				if sm.EPSG != wgs84 {
					c, ok = s.places.get(k)
				}
				if !ok {
					lon, lat, from, why := s.toWGS84(orb.Point{sm.Location[0], sm.Location[1]}, sm.EPSG, nil)
					c = place{lon: lon, lat: lat, located: "fault", reprojected: from, why: why}
					if why != "" {
						c = place{why: why}
					}
					if sm.EPSG != wgs84 {
						s.places.put(k, c)
					}
				}
				pl.lon, pl.lat, pl.located, pl.reprojected, pl.why = c.lon, c.lat, c.located, c.reprojected, c.why
			} else if c, ok := s.places.get(recKey{pl.dest, pl.id}); ok {
				pl.lon, pl.lat, pl.located, pl.reprojected, pl.why = c.lon, c.lat, c.located, c.reprojected, c.why
			} else {
				need = append(need, len(recs))
			}
			recs = append(recs, pl)
		}
		if capped || p.Next == "" || p.Next == lo.After {
			break
		}
		lo.After = p.Next
	}
	if err := s.placeFromBodies(ctx, recs, need); err != nil {
		return nil, false, err
	}
	return recs, capped, nil
}

// holdBodies waits until no other request reads record bodies to place
// or draw them, and returns the function that lets the next one in: the
// map's and the shapes' requests come together, and each page of bodies
// (placeBodyBytes, one record at least) is then held by one request at a
// time, not one per request.
func (s *Server) holdBodies(ctx context.Context) (release func(), err error) {
	select {
	case s.bodies <- struct{}{}:
		return func() { <-s.bodies }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// placeFromBodies places recs[need…] from their bodies (at most
// placeBodyBytes of bodies held at once, by one request at a time), and
// caches the places.
func (s *Server) placeFromBodies(ctx context.Context, recs []placed, need []int) error {
	if len(need) == 0 {
		return nil
	}
	release, err := s.holdBodies(ctx)
	if err != nil {
		return err
	}
	defer release()
	byDest := map[string][]int{}
	for _, i := range need {
		pl := &recs[i]
		if c, ok := s.places.get(recKey{pl.dest, pl.id}); ok {
			// Placed by the request that held the bodies before.
			pl.lon, pl.lat, pl.located, pl.reprojected, pl.why = c.lon, c.lat, c.located, c.reprojected, c.why
			continue
		}
		byDest[pl.dest] = append(byDest[pl.dest], i)
	}
	for dest, idx := range byDest {
		for _, part := range chunks(idx, broker.MaxFilterValues) {
			pos := make(map[string]int, len(part))
			ids := make([]string, len(part))
			for j, i := range part {
				ids[j], pos[recs[i].id] = recs[i].id, i
			}
			lo := broker.ListOptions{Destination: dest, Filter: broker.Filter{IDs: ids}, Limit: len(ids), MaxBytes: placeBodyBytes}
			for {
				p, err := s.store.List(ctx, lo)
				if err != nil {
					return err
				}
				for _, e := range p.Entries {
					if e.Record == nil {
						continue
					}
					i, ok := pos[e.Record.ID]
					if !ok {
						continue
					}
					c := s.placeOf(ctx, e.Record)
					s.places.put(recKey{dest, e.Record.ID}, c)
					pl := &recs[i]
					pl.lon, pl.lat, pl.located, pl.reprojected, pl.why = c.lon, c.lat, c.located, c.reprojected, c.why
				}
				if p.Next == "" || p.Next == lo.After {
					break
				}
				lo.After = p.Next
			}
		}
	}
	return nil
}

// placeOf places a record read with its body; it never fails: what
// cannot be read is said in why.
func (s *Server) placeOf(ctx context.Context, r *broker.Record) place {
	env := envelopeOf(r)
	if env == nil {
		return place{why: "not a dlq.v1 envelope"}
	}
	var pt orb.Point
	var p place
	epsg := broker.EPSGOf(env)
	switch ge := env.GeometryError; {
	case ge != nil && len(ge.Location) == 2:
		pt, p.located = orb.Point{ge.Location[0], ge.Location[1]}, "fault"
	case env.Geometry.Missing:
		return place{why: "the event has no geometry"}
	default:
		data := env.Geometry.Inline
		if env.Geometry.OffloadURI != "" {
			if s.opts.Blobs == nil || env.Geometry.ByteSize > maxDisplayBytes {
				return place{why: "the geometry is offloaded (start with --blobs to place it)"}
			}
			b, err := s.opts.Blobs.Fetch(ctx, offload.Ref{URI: env.Geometry.OffloadURI, Size: env.Geometry.ByteSize, SHA256: env.Geometry.ContentSHA256})
			if err != nil {
				return place{why: "the offloaded geometry cannot be read: " + clip(err.Error(), 200)}
			}
			data = b
		}
		c, ok := centroid(data, epsg)
		if !ok {
			return place{why: "the geometry has no finite position"}
		}
		pt, p.located = c, "centroid"
	}
	lon, lat, from, why := s.toWGS84(pt, epsg, env)
	if why != "" {
		return place{why: why}
	}
	p.lon, p.lat, p.reprojected = lon, lat, from
	return p
}

// periods are the x periods of the CRSs a geometry may wrap around the
// antimeridian in: longitude/latitude, and Web Mercator metres.
var periods = map[int]float64{0: 360, wgs84: 360, 3857: 2 * math.Pi * 6378137}

// centroid returns the centroid of a GeoJSON geometry in the CRS epsg
// (the mean of its finite positions when the planar centroid is not
// finite, as for a degenerate or self-crossing polygon). A geometry
// written across the antimeridian is first made continuous (see unwrap),
// so that Chukotka's centroid is in Chukotka, not at longitude 0.
func centroid(data []byte, epsg int) (orb.Point, bool) {
	g, err := geojson.ParseGeometry(data, geojson.Limits{MaxVertices: maxDisplayVertices})
	if err != nil || g.Geom == nil {
		return orb.Point{}, false
	}
	if period, ok := periods[epsg]; ok && geojson.CheckFinite(g) == nil {
		g.Geom, _ = unwrapBy(g.Geom, period)
		g.Points = nil
		geojson.Components(g.Geom, func(c geojson.Component) bool {
			g.Points = append(g.Points, c.Points...)
			return true
		})
	}
	if g.Vertices <= maxCentroidVertices && geojson.CheckFinite(g) == nil {
		if c, _ := planar.CentroidArea(g.Geom); finite(c) && (c != orb.Point{} || g.Geom.Bound().Contains(c)) {
			return c, true
		}
	}
	var sx, sy float64
	n := 0
	for _, q := range g.Points {
		if finite(q) {
			sx, sy, n = sx+q[0], sy+q[1], n+1
		}
	}
	if n == 0 {
		return orb.Point{}, false
	}
	return orb.Point{sx / float64(n), sy / float64(n)}, true
}

func finite(p orb.Point) bool {
	return !math.IsNaN(p[0]) && !math.IsNaN(p[1]) && !math.IsInf(p[0], 0) && !math.IsInf(p[1], 0)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !isRuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// Map clustering: a grid of cells cellPx pixels wide at the request's
// zoom, in Web Mercator, so clusters look the same size everywhere.
const (
	cellPx = 64
	// mergePx is how close two clusters' centres may come, in pixels,
	// before they are drawn as one; maxMergeClusters bounds the merge
	// (quadratic in the clusters in view; a view holds far fewer).
	mergePx          = 40
	maxMergeClusters = 2000
	// maxZoom is the zoom from which every record is its own marker
	// (records at the same place stay together).
	maxZoom = 16
)

// mapCluster is one marker of the map: a single record, or a cluster.
type mapCluster struct {
	Lon   float64        `json:"lon"`
	Lat   float64        `json:"lat"`
	Count int            `json:"count"`
	Class string         `json:"class,omitempty"` // the most frequent class
	By    map[string]int `json:"by_class,omitempty"`
	// Record is set for a single record.
	Record *mapRecord `json:"record,omitempty"`
	// Bounds is minlon,minlat,maxlon,maxlat of a cluster's records.
	Bounds [4]float64 `json:"bounds"`
}

type mapRecord struct {
	Destination string `json:"destination"`
	ID          string `json:"id"`
	EventID     string `json:"event_id"`
	Class       string `json:"class"`
	Kind        string `json:"reason_kind,omitempty"`
	Located     string `json:"located"`
	Reprojected int    `json:"reprojected_from,omitempty"`
}

type mapAnswer struct {
	Markers   []mapCluster `json:"markers"`
	InView    int          `json:"in_view"`
	Located   int          `json:"located"`
	Unlocated int          `json:"unlocated"`
	// Reprojected counts the matching records drawn after reprojection.
	Reprojected int            `json:"reprojected"`
	WhyNot      map[string]int `json:"why_not_on_map,omitempty"`
	// Capped is true when more records match than the map places (the
	// newest Limit): the counts are of those.
	Capped bool        `json:"capped,omitempty"`
	Limit  int         `json:"limit"`
	Index  indexStatus `json:"index"`
}

func mercY(lat float64) float64 {
	lat = math.Max(-85.05112878, math.Min(85.05112878, lat))
	s := math.Sin(lat * math.Pi / 180)
	return 0.5 - math.Log((1+s)/(1-s))/(4*math.Pi)
}

// clusters clusters recs (the records matching a map request) inside
// view at zoom.
func clusters(recs []placed, view orb.Bound, zoom int) mapAnswer {
	zoom = max(0, min(zoom, 30))
	cells := math.Exp2(float64(zoom)) * 256 / cellPx // cells across the world
	type acc struct {
		sx, sy float64
		n      int
		by     map[string]int
		first  *placed
		b      orb.Bound
	}
	grid := map[[2]int64]*acc{}
	ans := mapAnswer{WhyNot: map[string]int{}}
	for i := range recs {
		p := &recs[i]
		if p.located == "" {
			ans.Unlocated++
			ans.WhyNot[whyKey(p.why)]++
			continue
		}
		ans.Located++
		if p.reprojected != 0 {
			ans.Reprojected++
		}
		if !view.Contains(orb.Point{p.lon, p.lat}) {
			continue
		}
		ans.InView++
		var k [2]int64
		if zoom >= maxZoom {
			k = [2]int64{int64(math.Float64bits(p.lon)), int64(math.Float64bits(p.lat))}
		} else {
			k = [2]int64{int64(math.Floor((p.lon + 180) / 360 * cells)), int64(math.Floor(mercY(p.lat) * cells))}
		}
		a := grid[k]
		if a == nil {
			a = &acc{by: map[string]int{}, first: p, b: orb.Bound{Min: orb.Point{p.lon, p.lat}, Max: orb.Point{p.lon, p.lat}}}
			grid[k] = a
		}
		a.sx, a.sy, a.n = a.sx+p.lon, a.sy+p.lat, a.n+1
		a.by[p.class]++
		a.b = a.b.Extend(orb.Point{p.lon, p.lat})
	}
	// Neighbouring cells' clusters can sit side by side: merge, greedily
	// from the largest, those whose centres are closer than a marker.
	accs := make([]*acc, 0, len(grid))
	for _, a := range grid {
		accs = append(accs, a)
	}
	slices.SortFunc(accs, func(a, b *acc) int {
		if a.n != b.n {
			return b.n - a.n
		}
		return cmpPoint(a.sx/float64(a.n), a.sy/float64(a.n), b.sx/float64(b.n), b.sy/float64(b.n))
	})
	if zoom < maxZoom && len(accs) <= maxMergeClusters {
		world := math.Exp2(float64(zoom)) * 256
		px := func(a *acc) (float64, float64) {
			return (a.sx/float64(a.n) + 180) / 360 * world, mercY(a.sy/float64(a.n)) * world
		}
		merged := accs[:0]
		for _, a := range accs {
			ax, ay := px(a)
			var into *acc
			for _, m := range merged {
				mx, my := px(m)
				if math.Hypot(ax-mx, ay-my) < mergePx {
					into = m
					break
				}
			}
			if into == nil {
				merged = append(merged, a)
				continue
			}
			into.sx, into.sy, into.n = into.sx+a.sx, into.sy+a.sy, into.n+a.n
			for c, k := range a.by {
				into.by[c] += k
			}
			into.b = into.b.Union(a.b)
		}
		accs = merged
	}
	ans.Markers = make([]mapCluster, 0, len(accs))
	for _, a := range accs {
		m := mapCluster{Lon: a.sx / float64(a.n), Lat: a.sy / float64(a.n), Count: a.n,
			Bounds: [4]float64{a.b.Min[0], a.b.Min[1], a.b.Max[0], a.b.Max[1]}}
		best := -1
		for c, n := range a.by {
			if n > best || n == best && c < m.Class {
				m.Class, best = c, n
			}
		}
		if a.n == 1 {
			p := a.first
			m.Lon, m.Lat = p.lon, p.lat
			m.Record = &mapRecord{Destination: p.dest, ID: p.id, EventID: p.eventID, Class: p.class, Kind: p.kind, Located: p.located, Reprojected: p.reprojected}
		} else {
			m.By = a.by
		}
		ans.Markers = append(ans.Markers, m)
	}
	slices.SortFunc(ans.Markers, func(a, b mapCluster) int {
		if c := b.Count - a.Count; c != 0 {
			return c
		}
		if a.Lon != b.Lon {
			if a.Lon < b.Lon {
				return -1
			}
			return 1
		}
		switch {
		case a.Lat < b.Lat:
			return -1
		case a.Lat > b.Lat:
			return 1
		}
		return 0
	})
	return ans
}

func cmpPoint(ax, ay, bx, by float64) int {
	switch {
	case ax < bx:
		return -1
	case ax > bx:
		return 1
	case ay < by:
		return -1
	case ay > by:
		return 1
	}
	return 0
}

// whyKey turns a why into its bounded category (the detail of a failed
// blob read names the blob).
func whyKey(why string) string {
	if k, _, ok := strings.Cut(why, ": "); ok {
		return k
	}
	return why
}

// sourcePrefix cuts a source URI after scheme://host; "" is "(none)".
func sourcePrefix(uri string) string {
	if uri == "" {
		return "(none)"
	}
	scheme, rest, ok := strings.Cut(uri, "://")
	if !ok {
		if i := strings.IndexByte(uri, '/'); i > 0 {
			return uri[:i]
		}
		return clip(uri, 80)
	}
	host, _, _ := strings.Cut(rest, "/")
	return clip(scheme+"://"+host, 120)
}

type keyCount struct {
	Key   string `json:"key"`
	Count int    `json:"count"`
}

func topN(m map[string]int, n int) []keyCount {
	out := make([]keyCount, 0, len(m))
	for k, v := range m {
		out = append(out, keyCount{k, v})
	}
	slices.SortFunc(out, func(a, b keyCount) int {
		if a.Count != b.Count {
			return b.Count - a.Count
		}
		return strings.Compare(a.Key, b.Key)
	})
	if n > 0 && len(out) > n {
		out = out[:n]
	}
	return out
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// indexStatus is what /api/config, the map and the page's event stream
// say of the console's view of the store. The console keeps no index of
// its own (the name stays for the page): Ready is set once the store has
// been counted, Records is the open records at the last count.
type indexStatus struct {
	Ready   bool      `json:"ready"`
	Scanned int       `json:"scanned"`
	Records int       `json:"records"`
	Error   string    `json:"error,omitempty"`
	Built   time.Time `json:"built,omitzero"`
}

// watcher looks for new dead letters and counts the store's open records.
type watcher struct {
	s *Server
	// open is the open records at the last count, -1 before the first.
	open    atomic.Int64
	mu      sync.Mutex
	err     string
	counted time.Time
	// seen are the keys of the newest page at the last look (at most
	// pollPage): a record not among them and newer than all of them is
	// new.
	seen map[recKey]struct{}
	// latest is the newest write time among them (zero when the store
	// does not say).
	latest time.Time
}

// pollPage is how many of the newest records a look for new ones reads
// at a time; pollPages bounds the pages of one look.
const (
	pollPage  = 200
	pollPages = 50
)

func newWatcher(s *Server) *watcher {
	w := &watcher{s: s}
	w.open.Store(-1)
	return w
}

func (w *watcher) status() indexStatus {
	n := w.open.Load()
	w.mu.Lock()
	defer w.mu.Unlock()
	return indexStatus{Ready: n >= 0, Scanned: int(max(n, 0)), Records: int(max(n, 0)), Error: w.err, Built: w.counted}
}

func (w *watcher) count() int { return int(max(w.open.Load(), 0)) }

// recount counts the open records; it returns the count.
func (w *watcher) recount(ctx context.Context) (int, error) {
	n, err := w.s.openCount(ctx)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.err = "counting the store: " + err.Error()
		return 0, err
	}
	w.err, w.counted = "", time.Now()
	w.open.Store(int64(n))
	return n, nil
}

// pollNew reads the newest records until it meets one it saw at the last
// look, or one written before the newest it saw (at most pollPages
// pages), and returns the dead letters among those it had not seen,
// newest first. The first look only remembers.
func (w *watcher) pollNew(ctx context.Context) ([]broker.Entry, error) {
	lo := broker.ListOptions{Descending: true, Limit: pollPage, Summaries: true}
	if w.seen == nil {
		p, err := w.s.store.List(ctx, lo)
		if err != nil {
			return nil, err
		}
		w.remember(p.Entries)
		return nil, nil
	}
	var fresh, read []broker.Entry
	for range pollPages {
		p, err := w.s.store.List(ctx, lo)
		if err != nil {
			return nil, err
		}
		met := false
		for _, e := range p.Entries {
			if e.Record == nil {
				continue
			}
			_, ok := w.seen[recKey{e.Record.Destination, e.Record.ID}]
			if ok || !e.PublishedAt.IsZero() && !e.PublishedAt.After(w.latest) {
				met = true
				break
			}
			if len(read) < pollPage {
				read = append(read, e)
			}
			if e.Summary != nil && e.Summary.ReplayOf == "" {
				fresh = append(fresh, e)
			}
		}
		if met || p.Next == "" || p.Next == lo.After {
			break
		}
		lo.After = p.Next
	}
	if len(read) > 0 {
		w.remember(read)
	}
	return fresh, nil
}

// remember notes the newest records read (newest first).
func (w *watcher) remember(es []broker.Entry) {
	w.seen = make(map[recKey]struct{}, len(es))
	for _, e := range es {
		if e.Record == nil {
			continue
		}
		w.seen[recKey{e.Record.Destination, e.Record.ID}] = struct{}{}
		if e.PublishedAt.After(w.latest) {
			w.latest = e.PublishedAt
		}
	}
}

// watch counts the store, then looks for new dead letters every interval
// until ctx ends: new ones are announced to the page, and a count that
// changed otherwise (records replayed or purged elsewhere, by the CLI)
// too.
func (w *watcher) watch(ctx context.Context, every time.Duration) {
	log := w.s.log
	for {
		if _, err := w.recount(ctx); err == nil {
			break
		} else if ctx.Err() != nil {
			return
		} else {
			log.WarnContext(ctx, "geodlq serve: counting the store failed; retrying", slog.Any("error", err))
		}
		if !sleep(ctx, 5*every) {
			return
		}
	}
	if _, err := w.pollNew(ctx); err != nil && ctx.Err() == nil {
		log.WarnContext(ctx, "geodlq serve: reading the newest records failed", slog.Any("error", err))
	}
	w.s.hub.publish(event{Name: "index", Data: w.status()})
	// The count reads the store's Stats, which some stores answer by
	// reading their table: it runs every five polls at most, and never
	// more than 5% of the time.
	nextCheck := time.Now().Add(5 * every)
	for sleep(ctx, every) {
		fresh, err := w.pollNew(ctx)
		if err != nil && ctx.Err() == nil {
			log.WarnContext(ctx, "geodlq serve: polling for new records failed", slog.Any("error", err))
		}
		before := w.count()
		if len(fresh) > 0 {
			w.s.overviews.clear()
			w.open.Add(int64(len(fresh)))
			w.s.hub.publish(event{Name: "records", Data: w.s.newRecordsEvent(fresh)})
		}
		if len(fresh) == 0 && time.Now().Before(nextCheck) {
			continue
		}
		t0 := time.Now()
		n, err := w.recount(ctx)
		nextCheck = time.Now().Add(max(5*every, 20*time.Since(t0)))
		if err == nil && n != before+len(fresh) {
			w.s.overviews.clear()
			w.s.hub.publish(event{Name: "changed", Data: map[string]int{"records": n}})
		}
	}
}

// newRecordsEvent describes records that just arrived (at most 20 of
// them in full).
func (s *Server) newRecordsEvent(fresh []broker.Entry) map[string]any {
	var rows []map[string]any
	for _, e := range fresh[:min(len(fresh), 20)] {
		rows = append(rows, map[string]any{"destination": e.Record.Destination, "id": e.Record.ID,
			"event_id": e.Summary.EventID, "class": string(e.Summary.Class)})
	}
	return map[string]any{"new": len(fresh), "records": s.watch.count(), "latest": rows}
}

// openCount is the number of open (not replayed) records in the store,
// re-injected events aside.
func (s *Server) openCount(ctx context.Context) (int, error) {
	counts, err := s.store.Stats(ctx, broker.StatsOptions{})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, c := range counts {
		n += c.Pending + c.Leased
	}
	return n, nil
}
