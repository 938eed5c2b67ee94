package contracttest_test

import (
	"errors"
	"fmt"
	"slices"

	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/contracttest"
)

// A document the JSON Schema accepts but Decode refuses breaks one of the
// rules beyond the schema: here, an integer written as 1.0.
func ExampleBeyondSchema() {
	_, err := envelope.Decode([]byte(`{"schema_version":"dlq.v1","attempts":1.0}`))
	var ve *envelope.ValidationError
	if errors.As(err, &ve) {
		for _, v := range ve.Violations {
			if slices.Contains(contracttest.BeyondSchema(), v.Rule) {
				fmt.Println(v.Field, v.Rule)
			}
		}
	}
	// Output:
	// attempts integer
}
