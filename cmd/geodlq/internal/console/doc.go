// Package console is the operator console behind `geodlq serve`: an
// http.Handler that serves a single page (built from ui/ by `make ui` and
// embedded, so it needs no network) and the JSON API it runs on.
//
// The page shows every dead letter of a store on a map (the fault point,
// else the geometry's centroid, reprojected to EPSG:4326 with PROJ when
// the payload is in another CRS), clustered on the server and coloured by
// class; counts by destination, class, stage, EPSG and reason kind
// ([broker.Store.Stats]), failures over time and the top source prefixes;
// a filtered, cursor-paged list ([broker.Store.List]); each record's
// envelope, its geometry with the fault marked (both crossing segments of
// a self-intersection; NaN, unclosed-ring and out-of-range faults where
// they are), the restored payload verified against its hash, and a repair
// preview (GEOS MakeValid or PROJ reprojection). New dead letters arrive
// as server-sent events.
//
// # Actions
//
// With a token ([Options.Token]) the console replays and discards, as
// jobs: a dry run first, which resolves the selection to records and
// reports each one's outcome, then the real run, which must name that dry
// run (once, within 30 minutes) and acts on the records it found would be
// replayed or discarded. Replays go through replay.Replayer exactly as
// `geodlq replay` does (restore and verify, repair, check, re-inject with
// the original idempotency key, acknowledge only then: exactly once,
// nothing half acknowledged); discards through [broker.Store.Purge] by
// record id, which never deletes a leased record.
//
// # Security
//
// Reads are open to whoever reaches the address, so `geodlq serve` binds
// loopback by default, and the handler refuses requests whose Host is not
// a loopback name unless it listens on another address (DNS rebinding).
// Every mutating request needs "Authorization: Bearer <token>" — a header
// no cross-site form, link or image can send, which with the Origin and
// Sec-Fetch-Site checks is the CSRF defence — and a JSON body. Every
// answer carries a strict Content-Security-Policy (scripts, styles and
// data from the console only, no inline code, no framing). The page puts
// every string from an envelope on screen as text, never as HTML. Failed
// requests are answered with RFC 9457 problem details.
//
// The API is described by the OpenAPI document the console serves at
// /api/openapi.json.
package console
