package validity_test

import (
	"fmt"

	"github.com/paulmach/orb"

	"github.com/geodlq/geodlq/internal/validity"
)

func ExampleCheck() {
	bowtie := orb.Polygon{{{0, 0}, {1, 1}, {1, 0}, {0, 1}, {0, 0}}}
	fault, err := validity.Check(bowtie, nil)
	if err != nil {
		fmt.Println("GEOS would fail:", err)
		return
	}
	fmt.Println(fault.Reason())

	square := orb.Polygon{{{0, 0}, {1, 0}, {1, 1}, {0, 1}, {0, 0}}}
	fault, _ = validity.Check(square, nil)
	fmt.Println(fault == nil)
	// Output:
	// Self-intersection[0.5 0.5]
	// true
}
