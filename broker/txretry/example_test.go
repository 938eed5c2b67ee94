package txretry_test

import (
	"context"
	"fmt"

	"github.com/geodlq/geodlq/broker/txretry"
)

// Complete records that a side effect is done: a conflict is retried, and
// so is a lost answer, after which the function looks before it writes
// again, until the outcome is known or ctx ends.
func ExampleDo() {
	done := false // the row, in a real store
	attempts := 0
	err := txretry.Do(context.Background(), nil, func(ctx context.Context, a txretry.Attempt) error {
		attempts++
		if a.Uncertain && done {
			return nil // the earlier attempt took effect; only its answer was lost
		}
		switch attempts {
		case 1:
			return stateErr("40P01") // chosen as a deadlock victim: rolled back
		case 2:
			done = true
			return context.DeadlineExceeded // committed, but the answer was lost
		}
		done = true
		return nil
	}, &txretry.Options{Attempts: -1, RetryUnknown: true})
	fmt.Println(err, done, attempts)
	// Output: <nil> true 3
}
