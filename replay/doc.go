// Package replay is the exactly-once half of geodlq: idempotency keys
// derived once at ingestion, an atomic claims store with leases that
// consumers take before any side effect, and a [Replayer] that re-injects
// dead-lettered events with their preserved key.
//
// The guarantee is end to end. The replayer acknowledges a dead-letter
// record only after its re-injection is durable, so a crash can at worst
// re-inject an event twice; the consumer claims the event's key with
// [Once] before doing any spatial work, so the second delivery finds the
// key done and does nothing. Keys are never re-derived during replay: a
// re-serialised payload can hash differently.
//
// Replayers running at once never re-inject the same record: a
// [LeaseKeeper] renews the leases of the batch being worked on and fences
// each re-injection by its record's lease (renewed just before, cancelled
// if it can no longer be renewed). Claims stores retry the conflicts
// their database resolves by aborting a transaction, and record a
// completion until its outcome is known.
//
// Deterministic failures (invalid geometry, CRS mismatch) are replayed only
// through a configured [Repairer] — GEOS MakeValid or PROJ reprojection
// from package spatial — and the re-injected message is tagged with the
// dlq-repaired and dlq-repair headers. Schema violations and resource
// exhaustion are never replayed automatically.
//
// Claims stores implement [Claims]: [MemClaims] here, Redis and PostgreSQL
// in their packages; each passes the shared suite in replay/claimstest.
package replay
