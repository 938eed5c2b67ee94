// Package ingress is the gate in front of a queue: an [http.Handler]
// middleware and a plain function that validate an incoming spatial event
// before it is enqueued, so that a malformed payload is refused with a 400
// its producer can act on instead of travelling through the pipeline to
// the dead-letter store. It is the "pre-flight schema validation" of the
// managed-queues design: the dead-letter path stays reserved for events
// that are genuinely unprocessable at run time.
//
// # What is checked
//
// An event is a JSON object with source_uri (an absolute URI),
// processing_mode (one of a configured set, by default "vector"), an
// optional crs, and a GeoJSON geometry with type and coordinates, within
// byte, vertex, part and hole budgets (spatial.Checker's, except for the
// smaller byte and vertex defaults of a gate); see [Validate] for the exact
// rules. Nothing after the event but white space is accepted, nesting is
// refused before it is entered, and nothing is allocated on the strength
// of a Content-Length; docs/threat-model.md lists every limit. Each
// violation is reported with an RFC 6901 JSON pointer to the offending
// member or position, the failure class the event would have been
// dead-lettered with, a bounded kind, a message, and for geometry faults
// the location and the part/ring/vertex indexes used in dlq.v1 envelopes.
//
// The geometry rules are not written twice: the gate parses and checks
// with internal/geojson, the same code package spatial runs before GEOS,
// so a payload the gate refuses for structure, coordinates, rings or
// ranges is one the consumer's spatial.Checker refuses with the same
// class, kind, location and fault (a test runs the shared event corpus
// through both). Topology faults (self-intersections and the rest) and the
// full EPSG registry are the consumer's job, unless the program plugs a
// *spatial.Checker in as Options.GeometryChecker and Options.CRSChecker:
// it is pure Go too (GEOS's verdicts without GEOS, EPSG codes without
// PROJ), so a CGO_ENABLED=0 gate can; only CRSs given as WKT or PROJ
// strings need its cgo build.
//
// The package is pure Go: it builds with CGO_ENABLED=0 and imports no
// broker client or cloud SDK.
//
// # HTTP answers
//
// [Middleware] answers a refused event with status 400 (413 when it is
// over a byte, vertex, part or hole budget; a declared Content-Length over
// the byte budget is refused before the body is read) and an RFC 9457 problem
// details body, Content-Type application/problem+json:
//
//	{"type":"urn:geodlq:problem:invalid-event","title":"Invalid event","status":400,
//	 "detail":"The event was not enqueued: processing_mode \"raster\" is not one of: vector, and 1 more violation.",
//	 "instance":"/events",
//	 "errors":[
//	  {"pointer":"/processing_mode","class":"schema_violation","kind":"unknown_processing_mode",
//	   "message":"processing_mode \"raster\" is not one of: vector"},
//	  {"pointer":"/geometry/coordinates/0/0","class":"invalid_geometry","kind":"ring_not_closed",
//	   "message":"Ring is not closed[10 10]","location":[10,10],"fault":{"part":-1,"ring":0,"vertex":0}}]}
//
// The next handler is called only for a valid event, with the exact bytes
// received as its body.
package ingress
