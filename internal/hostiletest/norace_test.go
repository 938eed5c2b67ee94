//go:build !race

package hostiletest_test

// raceEnabled reports that the race detector is on.
const raceEnabled = false
