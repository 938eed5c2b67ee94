// Package proj is PROJ for package spatial: the resolver a
// [spatial.Checker] takes as Options.ResolveCRS, for the CRS definitions
// its pure-Go EPSG registry does not resolve (WKT and PROJJSON without a
// top-level identifier, PROJ strings, compound CRSs, other authorities),
// and the Reprojector of Checker.Reproject (and so the crs_mismatch
// repairer, the console's previews and geodlq export). [PROJJSON] gives
// PROJ's PROJJSON of an EPSG code, GeoParquet's crs member. It is one of
// geodlq's two cgo packages (with spatial/geos); package spatial itself
// links no C.
//
//	p, err := proj.New(nil)
//	if err != nil { ... } // wraps spatial.ErrNeedsCGO in a CGO_ENABLED=0 build
//	defer p.Close()
//	checker, err := spatial.NewChecker(&spatial.Options{ResolveCRS: p.ResolveCRS, Reprojector: p})
//
// # cgo, and what it costs
//
// It links PROJ through github.com/twpayne/go-proj and a small C shim
// (crs_shim.c) for what go-proj does not expose: resolving a definition to
// its EPSG code, and PROJJSON. Building needs a C toolchain and PROJ's
// development files (libproj-dev on Debian, PROJ >= 8), and running needs
// PROJ's database, proj.db ([ErrNoProjDB] otherwise). PROJ's contexts and
// transformations live on the C heap: one context for resolution, one for
// reprojection, and a bounded cache of transformations
// (Options.TransformCacheSize). PROJ's handles are not goroutine-safe:
// resolutions serialise on their context, which is cheap because the
// Checker caches them, and reprojection is rare.
//
// In a build without cgo the package compiles, [New] and [PROJJSON] fail
// with an error wrapping [spatial.ErrNeedsCGO] and [Version] is "".
package proj
