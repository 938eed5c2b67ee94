package pgmigrate_test

import (
	"fmt"

	"github.com/geodlq/geodlq/pgmigrate"
)

// Schema and table names are checked before they are put into SQL.
func ExampleCheckIdent() {
	fmt.Println(pgmigrate.CheckIdent("postgis", "table", "dead_letters", 40))
	fmt.Println(pgmigrate.CheckIdent("postgis", "table", `x"; DROP TABLE y; --`, 40))
	// Output:
	// <nil>
	// postgis: table "x\"; DROP TABLE y; --" must match [a-z_][a-z0-9_]* and be at most 40 bytes
}
