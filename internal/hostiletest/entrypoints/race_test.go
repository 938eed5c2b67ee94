//go:build race

package entrypoints_test

// raceEnabled reports that the race detector is on.
const raceEnabled = true
