package entrypoints_test

import (
	"fmt"

	"github.com/geodlq/geodlq/internal/corpus"
	"github.com/geodlq/geodlq/internal/hostiletest/entrypoints"
)

// An event family goes through every entry point; the race-detector run
// keeps the stages that start goroutines of their own, the plain run the
// others.
func ExampleStages() {
	for _, stage := range entrypoints.Stages(corpus.Family{Input: corpus.InputEvent}) {
		fmt.Println(stage, entrypoints.Concurrent(stage))
	}
	// Output:
	// check_event true
	// ingress_validate false
	// ingress_middleware false
	// build_decode_restore true
	// replay_repairers true
	// triage true
}
