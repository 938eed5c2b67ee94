package clockcache

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestClockCache(t *testing.T) {
	cc := New[int, string](3)
	for i := range 3 {
		cc.Put(i, fmt.Sprint(i))
	}
	_, _ = cc.Get(0) // referenced: survives the next eviction
	cc.Put(3, "3")
	_, ok := cc.Get(0)
	require.True(t, ok)
	_, ok = cc.Get(1)
	require.False(t, ok)
	v, ok := cc.Get(3)
	require.True(t, ok)
	require.Equal(t, "3", v)
	cc.Put(3, "three")
	v, _ = cc.Get(3)
	require.Equal(t, "three", v)
	require.Equal(t, 3, cc.Len())
	cc.Clear()
	require.Zero(t, cc.Len())
}
