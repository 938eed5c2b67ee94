package envelope

import (
	_ "embed" // the dlq.v1 JSON Schema
	"slices"
)

// SchemaID is the $id of the dlq.v1 JSON Schema ([Schema]), and the
// dataschema of the CloudEvents that carry an envelope
// ([ToCloudEvent]).
const SchemaID = "https://github.com/geodlq/geodlq/raw/main/envelope/dlq.v1.schema.json"

//go:embed dlq.v1.schema.json
var schemaJSON []byte

// Schema returns the JSON Schema (draft 2020-12) of the dlq.v1 wire
// format, the file envelope/dlq.v1.schema.json, so that a service can serve
// it or register it with a schema registry. Each call returns a new copy.
//
// The schema and [Decode] agree on every envelope: a document Decode
// accepts is valid against the schema, and one the schema rejects, Decode
// rejects. Decode also enforces what a JSON Schema cannot see, listed in
// the schema's description and in the package documentation under
// "Beyond the schema": the document is UTF-8, integers are written as
// integers, the envelope's objects have no duplicate member names, and the
// byte lengths and offsets of the verbatim values agree.
func Schema() []byte { return slices.Clone(schemaJSON) }
