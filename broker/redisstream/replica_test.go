package redisstream_test

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/redisstream"
	"github.com/geodlq/geodlq/internal/testenv"
)

// startRedis runs a private redis-server on a free loopback port, with
// extra arguments, until t ends.
func startRedis(t testing.TB, args ...string) *redis.Client {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if testenv.Required() {
			t.Fatalf("redis-server is not installed: %v; run scripts/services.sh", err)
		}
		t.Skipf("SKIPPING: redis-server is not installed (%v); run scripts/services.sh or set GEODLQ_REQUIRE_SERVICES=1 to fail instead", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	cmd := exec.Command(bin, append([]string{"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "",
		"--dir", t.TempDir(), "--daemonize", "no", "--loglevel", "warning"}, args...)...)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port)})
	t.Cleanup(func() { _ = c.Close() })
	require.Eventually(t, func() bool { return c.Ping(context.Background()).Err() == nil }, 60*time.Second, 20*time.Millisecond, "redis-server on port %d", port)
	return c
}

// With a real replica attached, WaitReplicas confirms the write; asking
// for more replicas than exist fails with ErrDurabilityUnconfirmed.
// WaitAOF succeeds only where the server can fsync to an AOF (7.2+ with
// appendonly yes).
func TestWaitWithARealReplica(t *testing.T) {
	ctx := context.Background()
	start := time.Now()
	primary := startRedis(t, "--appendonly", "yes", "--appendfsync", "always", "--repl-diskless-sync-delay", "0")
	port := primary.Options().Addr[len("127.0.0.1:"):]
	replica := startRedis(t, "--replicaof", "127.0.0.1", port)
	require.Eventually(t, func() bool {
		info, err := replica.Info(ctx, "replication").Result()
		return err == nil && infoField(info, "master_link_status") == "up"
	}, 60*time.Second, 50*time.Millisecond, "replica in sync")

	t.Logf("replica up after %v", time.Since(start))
	s, err := redisstream.New(primary, &redisstream.Options{WaitReplicas: 1, WaitTimeout: 5 * time.Second})
	require.NoError(t, err)
	require.NoError(t, s.Publish(ctx, "d", &broker.Message{Body: []byte("replicated")}))
	got, err := replica.XRange(ctx, redisstream.StreamKey(s, "d"), "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, got, 1, "on the replica when Publish returned")
	require.Equal(t, "replicated", got[0].Values["body"])

	two, err := redisstream.New(primary, &redisstream.Options{WaitReplicas: 2, WaitTimeout: 100 * time.Millisecond})
	require.NoError(t, err)
	require.ErrorIs(t, two.Publish(ctx, "d", &broker.Message{Body: []byte("x")}), redisstream.ErrDurabilityUnconfirmed)

	info, err := primary.Info(ctx, "server").Result()
	require.NoError(t, err)
	major, minor := version(infoField(info, "redis_version"))
	aof, err := redisstream.New(primary, &redisstream.Options{WaitAOF: true, WaitReplicas: 1, WaitTimeout: 5 * time.Second})
	require.NoError(t, err)
	err = aof.Publish(ctx, "d", &broker.Message{Body: []byte("fsynced")})
	if major > 7 || major == 7 && minor >= 2 {
		require.NoError(t, err, "WAITAOF on %d.%d with appendonly yes", major, minor)
	} else {
		require.ErrorIs(t, err, redisstream.ErrDurabilityUnconfirmed, "no WAITAOF before 7.2: Publish must not pretend")
	}
}
