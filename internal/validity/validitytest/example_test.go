package validitytest_test

import (
	"fmt"

	"github.com/geodlq/geodlq/internal/validity/validitytest"
)

func ExampleGeoJSON() {
	// The same program always makes the same geometry.
	a := validitytest.GeoJSON([]byte("a program"))
	b := validitytest.GeoJSON([]byte("a program"))
	fmt.Println(string(a) == string(b))
	// Output: true
}
