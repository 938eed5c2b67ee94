package redistest_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker/redisstream/internal/redistest"
)

// A test points a client at the proxy and loses the reply of one write
// after Redis ran it, to check that the code under test finds out.
func ExampleNewFaultProxy() {
	test := func(t *testing.T) {
		p := redistest.NewFaultProxy(t)
		c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
		defer c.Close()
		key := redistest.Prefix(t, "example") + ":k"
		p.DropReply(key)
		require.Error(t, c.Set(context.Background(), key, "v", 0).Err(), "the reply is lost")
		require.Equal(t, "v", redistest.Client(t).Get(context.Background(), key).Val(), "but the write happened")
	}
	_ = test // run by a test function: func TestX(t *testing.T) { test(t) }
}

// The example's test, run.
func TestFaultProxyDropsTheReplyNotTheWrite(t *testing.T) {
	p := redistest.NewFaultProxy(t)
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	defer c.Close()
	ctx := context.Background()
	prefix := redistest.Prefix(t, "proxy")
	require.NoError(t, c.Set(ctx, prefix+":warm", "1", 0).Err())
	p.DropReply(prefix + ":k")
	require.Error(t, c.Set(ctx, prefix+":k", "v", 0).Err(), "the reply is lost")
	require.Equal(t, 1, p.Hits())
	require.Equal(t, "v", redistest.Client(t).Get(ctx, prefix+":k").Val(), "but the write happened")
	p.DelayReply(prefix+":k", 300*time.Millisecond)
	slow := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ReadTimeout: 100 * time.Millisecond})
	defer slow.Close()
	require.Error(t, slow.Get(ctx, prefix+":k").Err(), "a reply later than ReadTimeout")
	require.Equal(t, []string{prefix + ":k", prefix + ":warm"}, redistest.Keys(t, c, prefix))
}
