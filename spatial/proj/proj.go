//go:build cgo

package proj

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"strconv"

	"github.com/paulmach/orb"
	"github.com/twpayne/go-proj/v11"

	"github.com/geodlq/geodlq/spatial"
	"github.com/geodlq/geodlq/spatial/internal/clockcache"
)

// PROJ is PROJ, for a [spatial.Checker]'s Options.ResolveCRS (the CRS
// definitions the registry does not resolve) and Options.Reprojector. It
// is safe for concurrent use: resolutions serialise on one PROJ context
// (the Checker caches them) and reprojections on another (go-proj's).
type PROJ struct {
	crs    *crsResolver
	proj   *proj.Context
	xforms *clockcache.Cache[[2]int, *proj.PJ]
}

var _ spatial.Reprojector = (*PROJ)(nil)

// New returns a PROJ configured by opts (nil for the defaults). It fails
// with an error wrapping [ErrNoProjDB] when PROJ has no database, and in a
// build without cgo with one wrapping [spatial.ErrNeedsCGO].
func New(opts *Options) (*PROJ, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.TransformCacheSize < 0 {
		return nil, errors.New("proj: negative TransformCacheSize in Options")
	}
	if o.TransformCacheSize == 0 {
		o.TransformCacheSize = DefaultTransformCacheSize
	}
	r, err := newCRSResolver()
	if err != nil {
		return nil, err
	}
	p := &PROJ{
		crs:    r,
		proj:   proj.NewContext(),
		xforms: clockcache.New[[2]int, *proj.PJ](o.TransformCacheSize),
	}
	// Free the C resolver even if the caller forgets Close.
	runtime.AddCleanup(p, func(r *crsResolver) { r.close() }, r)
	return p, nil
}

// Close releases the resolver's PROJ context and the cached
// transformations. ResolveCRS fails after Close; Transform still works,
// creating transformations as it needs them. It is idempotent and returns
// nil.
func (p *PROJ) Close() error {
	p.crs.close()
	p.xforms.Clear()
	return nil
}

// Version returns the version of PROJ whose headers the package was built
// with, "major.minor.patch" ("9.1.1"); "" in a build without cgo.
func Version() string {
	return fmt.Sprintf("%d.%d.%d", proj.VersionMajor, proj.VersionMinor, proj.VersionPatch)
}

// ResolveCRS asks PROJ about def: its EPSG code (from its identifier, or
// from proj_identify at a confidence of at least 70 when it carries none),
// name and kind. A definition PROJ refuses is a [*spatial.CRSError] with
// PROJ's errno and message. Its method value is what
// spatial.Options.ResolveCRS takes.
func (p *PROJ) ResolveCRS(def string) (spatial.CRSInfo, error) {
	return p.crs.resolve(def)
}

// transformer returns the cached PROJ transformation for the pair.
func (p *PROJ) transformer(from, to int) (*proj.PJ, error) {
	key := [2]int{from, to}
	if pj, ok := p.xforms.Get(key); ok {
		return pj, nil
	}
	raw, err := p.proj.NewCRSToCRS("EPSG:"+strconv.Itoa(from), "EPSG:"+strconv.Itoa(to), nil)
	if err != nil {
		return nil, err
	}
	pj, err := raw.NormalizeForVisualization()
	if err != nil {
		return nil, err
	}
	p.xforms.Put(key, pj)
	return pj, nil
}

// Transform reprojects pts (and z) in place with PROJ's transformation
// from EPSG:from to EPSG:to, normalised for visualisation (GeoJSON's axis
// order), cached per pair (Options.TransformCacheSize). A position without
// Z (NaN in z) is transformed at Z 0 and keeps no Z. See
// [spatial.Reprojector].
func (p *PROJ) Transform(from, to int, pts []orb.Point, z []float64) (int, error) {
	pj, err := p.transformer(from, to)
	if err != nil {
		return -1, fmt.Errorf("no PROJ transformation from EPSG:%d to EPSG:%d: %w", from, to, err)
	}
	n := len(pts)
	if n == 0 {
		return -1, nil
	}
	var (
		zp     *float64
		sz, nz int
		zbuf   []float64
	)
	if z != nil {
		// NaN marks a position without Z; PROJ takes 0 for those.
		zbuf = make([]float64, n)
		for i, v := range z {
			if !math.IsNaN(v) {
				zbuf[i] = v
			}
		}
		zp, sz, nz = &zbuf[0], 8, n
	}
	const stride = 16 // an orb.Point is two float64s
	terr := pj.TransGeneric(proj.DirectionFwd, &pts[0][0], stride, n, &pts[0][1], stride, n, zp, sz, nz, nil, 0, 0)
	for i := range pts {
		bad := !finiteXY(pts[i])
		if zbuf != nil && !math.IsNaN(z[i]) {
			bad = bad || math.IsNaN(zbuf[i]) || math.IsInf(zbuf[i], 0)
		}
		if bad {
			return i, errors.New("position outside the transformation's domain")
		}
	}
	if terr != nil {
		return -1, fmt.Errorf("PROJ: %w", terr)
	}
	for i, v := range z {
		if !math.IsNaN(v) {
			z[i] = zbuf[i]
		}
	}
	return -1, nil
}

func finiteXY(p orb.Point) bool {
	return !math.IsNaN(p[0]) && !math.IsNaN(p[1]) && !math.IsInf(p[0], 0) && !math.IsInf(p[1], 0)
}
