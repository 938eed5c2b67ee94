//go:build !unix

package kafkatest

import "context"

// lockFile does not lock where flock is missing: concurrent first builds
// each build the server, and the last rename wins.
func lockFile(context.Context, string) (func(), error) { return func() {}, nil }
