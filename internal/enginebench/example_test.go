package enginebench_test

import (
	"fmt"

	"github.com/geodlq/geodlq/internal/enginebench"
)

func Example() {
	bowtie := []byte(`{"type":"Feature","properties":{},"geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}}`)
	reason, err := enginebench.NewGEOS().Check(bowtie)
	fmt.Println(reason, err)
	fmt.Println(enginebench.SimpleFeatures(bowtie) != nil)
	// Output:
	// Self-intersection[0.5 0.5] <nil>
	// true
}
