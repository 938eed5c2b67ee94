// Package contracttest proves the dlq.v1 contract from outside package
// envelope. It is a module of its own, for tests only, so that its
// dependencies (a JSON Schema validator, the CloudEvents SDK and its
// Kafka binding, a YAML parser) never enter the module graph of geodlq's
// users.
//
// Its tests build envelopes with envelope.Builder over every corpus in the
// repository (internal/corpus's sample events and hostile inputs, the
// envelope package's fuzz seeds, a large offloaded geometry) and forge
// invalid ones, then check that three enforcers of the contract agree on
// each document:
//
//   - envelope.Decode;
//   - the JSON Schema envelope/dlq.v1.schema.json, through
//     github.com/santhosh-tekuri/jsonschema/v6;
//   - the Python reader in contrib/python, through Debian's python3 and
//     python3-jsonschema, which must also restore every valid envelope's
//     payload to the very bytes envelope.Restore returns.
//
// A document Decode accepts is valid against the schema; a document the
// schema rejects, Decode rejects; and where the schema accepts what Decode
// rejects, the reason is one of the rules a JSON Schema cannot state (see
// [BeyondSchema]), which the Python reader enforces too.
//
// The Python reader is also held to Decode's verdict on random edits of
// those documents, to Go's offload.DirStore rule on blob directories whose
// paths are bent by symbolic links (TestBlobSymlinks), and to memory
// linear in the envelope: TestPythonReaderMemory measures its peak
// resident memory on 21 MB envelopes, TestPythonReaderOutOfMemory runs it
// short of memory and wants a LimitError in one line, never a traceback.
//
// The tests also validate docs/asyncapi.yaml against the AsyncAPI 3.0.0
// schema, and send every corpus dead letter through the CloudEvents Go SDK
// (its HTTP binding over a real connection, its Kafka binding
// kafka_sarama) and JS SDK (npm cloudevents, run with node from js/, which
// scripts/services.sh installs with npm ci) in structured and binary
// mode: what the SDKs write back must read back to the same envelope.
package contracttest

// BeyondSchema returns the rules (as envelope.Violation.Rule values) of
// dlq.v1 that a JSON Schema cannot state, because a validator sees the
// parsed document, not its bytes: the document is UTF-8 ("utf8"), the
// envelope's objects have no duplicate member names ("duplicate"),
// integers are written as integers ("integer"), and the lengths and
// offsets of the verbatim values agree ("byte_size", "payload_size",
// "range").
func BeyondSchema() []string {
	return []string{"utf8", "duplicate", "integer", "byte_size", "payload_size", "range"}
}
