package hostiletest_test

import (
	"fmt"

	"github.com/geodlq/geodlq/internal/hostiletest"
)

// The memory target for a 32 MiB input, for the whole process, and what
// GEOS may keep on top of it for a million-position ring.
func ExampleBudget() {
	fmt.Println(hostiletest.Budget(32<<20)>>20, "MiB")
	fmt.Println((1_000_000*hostiletest.GEOSPerVertex+hostiletest.GEOSPerPart)>>20, "MiB")
	// Output:
	// 192 MiB
	// 22 MiB
}
