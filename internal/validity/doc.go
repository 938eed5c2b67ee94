// Package validity decides whether a geometry is valid exactly as GEOS 3.11
// does (GEOSisValidReason_r, OGC rules), in pure Go: the same verdict, the
// same message and the same point, so that geodlq's check path gives the
// dead-letter envelope GEOS's reason without linking GEOS.
//
// Exactly means the same first fault. A polygon often has several faults,
// and which one GEOS reports follows from the order its algorithm meets
// them in; so the engine follows GEOS's algorithm step by step rather than
// re-deriving the rules:
//
//   - IsValidOp's checks in its order: coordinates, closed rings, ring sizes
//     (repeated points not counted), then per Polygon or MultiPolygon the
//     topology analysis, holes inside the shell, holes not nested, shells
//     not nested, interior connected; collections member by member;
//   - PolygonTopologyAnalyzer's segment intersection search: rings without
//     repeated points cut into monotone chains, the chains in an STR tree
//     built as GEOS's TemplateSTRtree builds it (sorted as libstdc++'s
//     std::sort leaves ties), queried in its order, every pair of segments
//     judged as PolygonIntersectionAnalyzer judges it, including the work
//     GEOS does after it is "done" (the chain pair in progress, and the first
//     chain of every later query), which can move the reported point;
//   - the segment intersector (RobustLineIntersector), its computed
//     intersection points, and orientation by Shewchuk's filter with a
//     double-double fallback (CGAlgorithmsDD), every product rounded on its
//     own as GEOS built for amd64 rounds it (a compiler may not fuse them);
//   - ring touches and hole cycles (PolygonRing), point location by ray
//     crossing (RayCrossingCounter, IndexedPointInAreaLocator), nested
//     holes and shells (IndexedNestedHoleTester, IndexedNestedPolygonTester);
//   - the reason's numbers as C++ streams print them at precision 15
//     ([AppendCoordinate]).
//
// The engine reads the parser's positions in place (orb rings are slices
// of one array) and allocates per ring and chain, never per vertex. Point
// location in rings that are asked about often (the shell of a polygon
// with thousands of holes) goes through an index of segment y-ranges,
// which cannot change a ray-crossing answer, so no check is quadratic in
// the input.
//
// The tests hold the engine to GEOS itself (through go-geos, in cgo test
// builds): GEOS's xmltester isValid cases (testdata), generated geometries
// (package validitytest) and the differential fuzz target
// FuzzEnginesAgree.
package validity
