package clocklease_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/internal/clocklease"
)

var codec = clocklease.Codec{Prefix: "sqs", Sep: ":", Expired: "visibility timeout ended"}

func TestMargin(t *testing.T) {
	require.Equal(t, 200*time.Millisecond, clocklease.Margin(2*time.Second))
	require.Equal(t, time.Second, clocklease.Margin(10*time.Second))
	require.Equal(t, time.Second, clocklease.Margin(12*time.Hour))
}

func TestEncodeDecode(t *testing.T) {
	deadline := time.Unix(1700000000, 123456789)
	l := codec.Encode(deadline, "AQE:handle with:colons")
	require.Equal(t, "1700000000123456789:AQE:handle with:colons", l)
	d, h, err := codec.Decode(l)
	require.NoError(t, err)
	require.True(t, d.Equal(deadline))
	require.Equal(t, "AQE:handle with:colons", h, "the handle is everything after the first separator")

	space := clocklease.Codec{Prefix: "pubsub", Sep: " "}
	require.Equal(t, "1700000000123456789 ack-1", space.Encode(deadline, "ack-1"))

	for _, bad := range []string{"", "garbage", "12:", ":h", "x:h", "12 h"} {
		_, _, err := codec.Decode(bad)
		require.EqualError(t, err, `sqs: malformed lease "`+bad+`"`)
	}
}

func TestCheck(t *testing.T) {
	margin := clocklease.Margin(30 * time.Second)
	live := &broker.Record{ID: "m-1", Lease: codec.Encode(time.Now().Add(time.Minute), "h1")}
	h, err := codec.Check(live, "ack", margin)
	require.NoError(t, err)
	require.Equal(t, "h1", h)

	expired := &broker.Record{ID: "m-2", Lease: codec.Encode(time.Now().Add(-time.Minute), "h2")}
	_, err = codec.Check(expired, "release", margin)
	require.ErrorIs(t, err, broker.ErrLeaseLost)
	require.Regexp(t, `^sqs: release m-2: visibility timeout ended 1m0(\.\d+)?s ago \(another consumer may hold it\): `, err.Error())

	within := &broker.Record{ID: "m-3", Lease: codec.Encode(time.Now().Add(margin/2), "h3")}
	_, err = codec.Check(within, "ack", margin)
	require.ErrorIs(t, err, broker.ErrLeaseLost, "less than the margin left")

	_, err = codec.Check(nil, "ack", margin)
	require.EqualError(t, err, "sqs: ack: nil record")
	_, err = codec.Check(&broker.Record{ID: "m-4", Lease: "garbage"}, "ack", margin)
	require.EqualError(t, err, `sqs: malformed lease "garbage"`)
	require.False(t, errors.Is(err, broker.ErrLeaseLost))
}

func TestSettled(t *testing.T) {
	var s clocklease.Settled
	require.False(t, s.Has("h1"))
	s.Mark("h1", time.Now().Add(time.Minute))
	require.True(t, s.Has("h1"))
	require.False(t, s.Has("h2"))
	// Past 4096 handles, those whose deadline passed are forgotten; live
	// ones are kept.
	for i := range 5000 {
		s.Mark(strconv.Itoa(i), time.Now().Add(-time.Second))
	}
	require.True(t, s.Has("h1"))
	require.True(t, s.Has("4999"), "the newest is kept")
	require.False(t, s.Has("0"), "expired ones were pruned")
}
