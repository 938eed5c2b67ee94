package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/internal/testenv"
)

// TestRedis runs the binary against the Redis Streams store on a real
// Redis: dead-letter, list and show (lease and release), replay with a
// repair, and a second replay that finds nothing.
func TestRedis(t *testing.T) {
	t.Parallel()
	addr := testenv.Redis(t)
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	prefix := "geodlq-cli-" + hex.EncodeToString(rnd[:])
	t.Cleanup(func() {
		cl := redis.NewClient(&redis.Options{Addr: addr})
		defer cl.Close()
		ctx := context.Background()
		keys, _ := cl.Keys(ctx, prefix+":*").Result()
		if len(keys) > 0 {
			cl.Del(ctx, keys...)
		}
	})
	c := cli{t: t, store: "redis://" + addr + "/0?geodlq_prefix=" + prefix + "&lease_ttl=10s",
		blobs: "file://" + filepath.Join(t.TempDir(), "blobs")}
	c.must(exitProblems, seedLines(), "check", "--dead-letter", "parcels", "--max-vertices", "5000", "-")

	dest := []string{"--dest", "parcels.poison.dlt"}
	require.Equal(t, []string{"evt-9", "evt-gc", "evt-provider-a", "evt-provider-b"}, listIDs(t, c, append(dest, "--reason", "self_intersection")...))
	require.Equal(t, largeEvent("evt-big-1"), c.must(exitOK, nil, append(dest, "show", "--raw", "evt-big-1")...).stdout)
	rep := replayJSON(t, c, exitOK, append(dest, "--repair", "make-valid", "--reason", "self_intersection", "--target", c.store)...)
	require.Equal(t, map[string]int{"repaired": 4}, rep.Counts, "%+v", rep)
	require.Len(t, listIDs(t, c, "--dest", "parcels"), 4, "re-injected into the source stream")
	again := replayJSON(t, c, exitOK, append(dest, "--repair", "make-valid", "--reason", "self_intersection", "--target", c.store)...)
	require.Zero(t, again.Counts["repaired"], "acknowledged records never come back")
	require.Empty(t, listIDs(t, c, append(dest, "--reason", "self_intersection")...))
}

// TestRedisQuietFailures: an unreachable Redis is one line on stderr, the
// command's own error, and no go-redis log line (issue 12, item 8); a
// Redis without a store under the prefix is "no geodlq store here", and a
// reading command writes nothing there.
func TestRedisQuietFailures(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	refused := ln.Addr().String()
	require.NoError(t, ln.Close())
	c := cli{t: t, store: "redis://" + refused + "/0"}
	r := c.must(exitStore, nil, "list")
	require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line, the command's error:\n%s", r.stderr)
	require.Contains(t, r.stderr, "connection refused")
	require.NotContains(t, r.stderr, "redis: connection pool")

	addr := testenv.Redis(t)
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	prefix := "geodlq-cli-empty-" + hex.EncodeToString(rnd[:])
	c = cli{t: t, store: "redis://" + addr + "/0?geodlq_prefix=" + prefix}
	r = c.must(exitStore, nil, "list")
	require.Contains(t, r.stderr, "no geodlq store here")
	cl := redis.NewClient(&redis.Options{Addr: addr})
	defer cl.Close()
	keys, err := cl.Keys(context.Background(), prefix+"*").Result()
	require.NoError(t, err)
	require.Empty(t, keys, "a reading command created nothing")
}
