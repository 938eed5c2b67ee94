// Package geos is GEOS for package spatial: the engine a
// [spatial.Checker] takes as Options.GEOS for MakeValid (and so the
// invalid_geometry repairer of Checker.Repairers) and for
// spatial.EngineGEOS, the validity check the pure-Go default is tested
// against. It is one of geodlq's two cgo packages (with spatial/proj);
// package spatial itself links no C.
//
//	g, err := geos.New()
//	if err != nil { ... } // wraps spatial.ErrNeedsCGO in a CGO_ENABLED=0 build
//	defer g.Close()
//	checker, err := spatial.NewChecker(&spatial.Options{GEOS: g})
//
// # cgo, and what it costs
//
// It links GEOS through github.com/twpayne/go-geos and a small C shim
// (geos_shim.c) that builds a geometry from the parser's flat positions
// and checks it in one cgo call. Building needs a C toolchain and GEOS's
// development files (libgeos-dev on Debian; GEOS >= 3.10 for MakeValid's
// "structure" method). Every cgo call costs tens of nanoseconds on top of
// the work, and GEOS's objects live on the C heap, which the Go garbage
// collector neither sees nor counts: the engine destroys geometries as
// soon as it is done with them and pools GEOS contexts (one per concurrent
// caller, at most GOMAXPROCS idle). GEOS handles are not goroutine-safe,
// so each concurrent call takes its own from the pool. A GEOS exception
// surfaces in go-geos as a panic; the engine recovers it and returns an
// error, which the Checker reports as class unknown.
//
// In a build without cgo the package compiles, [New] fails with an error
// wrapping [spatial.ErrNeedsCGO] and [Version] is "".
package geos
