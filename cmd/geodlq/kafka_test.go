package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker/kafka/kafkatest"
)

// TestKafka runs the binary against a kfake Kafka (package kafkatest, on
// loopback): dead-letter into a topic, list and show through the replay
// group (lease and release), replay with a repair into the source topic,
// and a second replay that finds nothing (committed offsets).
func TestKafka(t *testing.T) {
	t.Parallel()
	kc, err := kafkatest.NewCluster(context.Background(), &kafkatest.Options{Topics: []string{"parcels"}, GroupMinSessionTimeout: 100 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = kc.Close() })
	c := cli{t: t, store: "kafka://" + strings.Join(kc.Addrs(), ",") + "?lease_ttl=10s&join_wait=5s",
		blobs: "file://" + filepath.Join(t.TempDir(), "blobs")}
	c.must(exitProblems, seedLines(), "check", "--dead-letter", "parcels", "--max-vertices", "5000", "-")

	r := c.must(exitOK, nil, "list")
	require.Contains(t, r.stdout, "evt-provider-b", "the store lists its topics without leasing")
	dest := []string{"--dest", "parcels.poison.dlt"}
	require.Equal(t, []string{"evt-9", "evt-gc", "evt-provider-a", "evt-provider-b"}, listIDs(t, c, append(dest, "--reason", "self_intersection")...))
	require.Equal(t, largeEvent("evt-big-2"), c.must(exitOK, nil, append(dest, "show", "--raw", "evt-big-2")...).stdout)

	rep := replayJSON(t, c, exitOK, append(dest, "--repair", "make-valid", "--reason", "self_intersection", "--target", c.store)...)
	require.Equal(t, map[string]int{"repaired": 4}, rep.Counts, "%+v", rep)
	views := listViews(t, c, "--dest", "parcels")
	require.Len(t, views, 4, "re-injected into the source topic")
	for _, v := range views {
		require.Equal(t, "true", v.Headers["dlq-repaired"])
	}
	again := replayJSON(t, c, exitOK, append(dest, "--repair", "make-valid", "--reason", "self_intersection", "--target", c.store)...)
	require.Zero(t, again.Counts["repaired"], "acknowledged records never come back")
}
