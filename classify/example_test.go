package classify_test

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/geodlq/geodlq/classify"
)

// User code marks its own errors, and the policy decides what happens.
func Example() {
	policy := classify.Policy{MaxAttempts: 3, BaseDelay: 100 * time.Millisecond, Rand: func() float64 { return 0.5 }}

	tileServerDown := classify.Transient(errors.New("tiles: 503 Service Unavailable"))
	for attempt := 1; attempt <= 3; attempt++ {
		d := policy.Decide(tileServerDown, attempt)
		fmt.Println(attempt, d.Action, d.Delay, d.Route)
	}

	bowtie := classify.WithStage(classify.InvalidGeometry(errors.New("Self-intersection[0.5 0.5]")), classify.StageTopologyValidation)
	d := policy.Decide(fmt.Errorf("handler: %w", bowtie), 1)
	fmt.Println(d.Class, classify.StageOf(bowtie), d.Action, d.Route)
	// Output:
	// 1 retry 50ms none
	// 2 retry 100ms none
	// 3 dead_letter 0s retry
	// invalid_geometry topology_validation dead_letter poison
}

// Rules teach a classifier about errors the defaults do not know.
func ExampleNewClassifier() {
	errQuota := errors.New("quota exceeded")
	c := classify.NewClassifier(func(err error) (classify.Class, bool) {
		if errors.Is(err, errQuota) {
			return classify.ClassResourceExhausted, true
		}
		return "", false
	})
	fmt.Println(c.Classify(fmt.Errorf("geocoder: %w", errQuota)))
	fmt.Println(c.Classify(errors.New("something odd")))
	// Output:
	// resource_exhausted
	// unknown
}

// A replay tool takes the classes to replay as a flag.
func ExampleClassList() {
	var classes classify.ClassList
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.Var(&classes, "class", "only these failure classes (comma-separated)")
	if err := fs.Parse([]string{"-class", "transient,unknown", "-class", "invalid_geometry"}); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(classes, len(classes))
	fmt.Println(classes.Set("bogus"))
	// Output:
	// transient,unknown,invalid_geometry 3
	// classify: unknown name: failure class "bogus"
}
