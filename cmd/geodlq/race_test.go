//go:build race

package main

// raceEnabled builds raceBinary, which the commands in raceCommands run,
// with -race too.
const raceEnabled = true
