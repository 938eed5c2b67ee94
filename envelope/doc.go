// Package envelope defines dlq.v1, the wire format of a dead-lettered
// spatial event, and builds, encodes, decodes, validates and restores it.
//
// An envelope carries everything a replay needs to act safely: the raw
// payload byte for byte (the core promise — replay must see exactly what
// the consumer saw, or an idempotency key derived from it will no longer
// match), the failure class and stage, the exact geometry error, the CRS
// with its EPSG code, the idempotency key verbatim, and the geometry —
// inline, or as a pointer to an offloaded blob with its size and SHA-256.
//
// [Builder.Build] makes an envelope from a failed event whatever the
// payload looks like; [Envelope.Encode] and [Decode] convert to and from
// the wire; [Envelope.Validate] checks the rules; [Envelope.Restore]
// returns the original payload, verified, and [Envelope.OpenPayload]
// streams it, verified as it goes (ending with io.EOF only once it has).
//
// # Wire format dlq.v1
//
// A JSON object. Encode writes the fields in this order, omits the
// optional ones that are empty, and writes raw_payload last.
//
//	field                      type     meaning
//	schema_version             string   always "dlq.v1"
//	event_id                   string   payload's event_id/id, or derived from the key
//	idempotency_key            string   key assigned at ingestion (header, else the event's own
//	                                    idempotency_key member), verbatim
//	idempotency_key_derived    bool     optional; true when the event had no key and one was derived
//	failure_class              string   transient | invalid_geometry | schema_violation |
//	                                    crs_mismatch | resource_exhausted | unknown
//	failed_stage               string   parse | crs_transform | topology_validation |
//	                                    spatial_join | persist
//	destination                string   retry | poison (deterministic classes: poison only)
//	error_message              string   the error's message, verbatim (may be truncated with a marker)
//	geometry_error             object   optional; the geometry detail:
//	  .reason                  string     validity reason, e.g. "Self-intersection[0.5 0.5]"
//	  .kind                    string     optional; bounded label, e.g. "self_intersection"
//	  .location                [x, y]     optional; offending point in payload coordinates
//	  .epsg                    int        EPSG code involved; always present for crs_mismatch (0 = unknown)
//	  .fault                   object     optional; {part, ring, vertex, on_segment} indexes
//	source_crs                 string   payload's crs member (string, or named CRS's
//	                                    properties.name); "" when missing or null
//	source_epsg                int      optional; EPSG code of source_crs
//	geometry                   object   the geometry reference:
//	  .inline                  any        the geometry's exact bytes (per inline_encoding), or
//	  .offload_uri             string     <base>/<prefix>/<sha256>.geojson — exactly one of the two
//	  .inline_encoding         string     optional; "string" | "base64" (default "json")
//	  .byte_size               int        geometry size in bytes
//	  .content_sha256          string     SHA-256 of the geometry's exact bytes, 64 lowercase hex
//	  .payload_offset          int        where the geometry's value starts in the payload; -1 if missing
//	  .missing                 bool       optional; true when the payload had no geometry
//	                                      (inline is then {"type":"GeometryCollection","geometries":[]})
//	geometry_type              string   optional; GeoJSON type of the geometry
//	vertex_count               int      optional; number of positions
//	payload_sha256             string   SHA-256 of the exact original payload, 64 lowercase hex
//	payload_size               int      original payload size in bytes
//	attempts                   int      attempts before dead-lettering, at least 1
//	first_seen_at              string   RFC 3339 time the event was first received
//	dead_lettered_at           string   RFC 3339 time the envelope was built
//	trace_id                   string   optional; trace correlation id
//	source                     object   optional; broker provenance {system, topic, partition,
//	                                    offset, message_id, key (base64), group_id, dedup_id,
//	                                    delivery_count, timestamp}
//	raw_payload_offload_uri    string   optional; the whole original payload's blob (<sha256>.json),
//	                                    described by payload_size and payload_sha256; then no raw_payload
//	raw_payload_encoding       string   optional; "string" | "base64" (default "json")
//	raw_payload                any      the payload as persisted (per raw_payload_encoding); an
//	                                    offloaded geometry's value replaced by {"$ref":"<offload_uri>"}
//
// # Verbatim values
//
// raw_payload and geometry.inline are never passed through encoding/json,
// which would compact them, escape <, > and &, and replace invalid UTF-8.
// A payload that is a JSON document in valid UTF-8 with no surrounding
// whitespace is embedded as is ("json"); any other valid UTF-8 (NaN
// tokens, whitespace around the document, a text body, the empty body) as
// a JSON string escaped so that decoding yields the same bytes
// ("string"); anything else as base64. payload_sha256 proves the result.
//
// # Size
//
// Geometries above the [offload.Offloader]'s threshold (256 KiB by
// default) are offloaded. When the destination has a message limit
// (Input.MaxBytes), Build offloads further and finally truncates the error
// message; see [Builder.Build].
//
// # The published contract
//
// [Schema] returns the JSON Schema (draft 2020-12) of dlq.v1, the file
// envelope/dlq.v1.schema.json, whose $id is [SchemaID]. Decode accepts
// exactly the documents the schema accepts that also obey the rules a JSON
// Schema cannot state, because a validator sees the parsed document and
// not its bytes:
//
//   - the document is UTF-8 JSON text, at most 10,000 levels deep;
//   - the envelope's own objects (the envelope, geometry, geometry_error,
//     its fault, source) have no duplicate member names;
//   - integers are written as integers (1, not 1.0 or 1e0);
//   - geometry.byte_size is the length of the inline geometry's bytes,
//     payload_size that of the original payload (so of raw_payload, less
//     an offloaded geometry's byte_size plus its {"$ref":…}), and
//     geometry.payload_offset is at most payload_size.
//
// internal/contracttest holds Decode, the schema and the Python reader in
// contrib/python to the same verdicts on every corpus in the repository.
// [ToCloudEvent] and [FromCloudEvent] bind an envelope to CloudEvents 1.0
// in structured JSON mode (the envelope as data_base64 by default, so that
// no intermediary re-serialises it), [ToCloudEventHTTP] and
// [FromCloudEventHTTP], [ToCloudEventKafka] and [FromCloudEventKafka] in
// the binary mode of the HTTP and Kafka protocol bindings (attributes as
// ce-* and ce_* headers, the envelope as the body); every From function
// applies the same checks. docs/asyncapi.yaml describes the dead-letter
// channels. docs/contract.md
// has the whole contract.
//
// # Versioning
//
//   - A v1 reader ignores members it does not know: a later revision of
//     dlq.v1 may add optional members with lower-case snake_case names, and
//     keeps schema_version "dlq.v1". Decode skips them (and Encode, which
//     writes only the members of this revision, drops them); the schema
//     allows them.
//   - Anything a v1 reader would misread is a v2: removing, renaming or
//     retyping a member, making one required, adding a value to an enum
//     (failure_class, failed_stage, destination, the encodings), relaxing a
//     byte rule. A v2 has schema_version "dlq.v2" and a schema of its own.
//   - Decode refuses a schema_version other than "dlq.v1", or none, with a
//     [*VersionError] (wrapping [ErrUnsupportedVersion]) before reading
//     anything else; every other defect is a [*ValidationError] (wrapping
//     [ErrInvalid]).
package envelope
