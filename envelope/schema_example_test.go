package envelope_test

import (
	"encoding/json"
	"fmt"

	"github.com/geodlq/geodlq/envelope"
)

// A service can serve the schema, or register it with a schema registry
// under its $id.
func ExampleSchema() {
	var s struct {
		ID       string   `json:"$id"`
		Draft    string   `json:"$schema"`
		Required []string `json:"required"`
	}
	if err := json.Unmarshal(envelope.Schema(), &s); err != nil {
		panic(err)
	}
	fmt.Println(s.ID == envelope.SchemaID)
	fmt.Println(s.Draft)
	fmt.Println(s.Required[:3])
	// Output:
	// true
	// https://json-schema.org/draft/2020-12/schema
	// [schema_version event_id idempotency_key]
}
