package mysql

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
)

// FuzzHeaders: any headers, valid UTF-8 or not, come back from their
// stored form byte for byte.
func FuzzHeaders(f *testing.F) {
	f.Add("dlq-class", "invalid_geometry", "caf\xe9", "\x00\xff")
	f.Add("", "", "k", strings.Repeat("\xff", 1<<12))
	f.Add("ünï 🗺", "\\u0000\"", "\xed\xa0\x80", "x")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		h := map[string]string{k1: v1, k2: v2}
		clean, binary, err := encodeHeaders(h)
		require.NoError(t, err)
		got, err := decodeHeaders(clean, binary)
		require.NoError(t, err)
		require.Equal(t, h, got)
	})
}

// FuzzParseURL: no URL makes the opener's parser panic; a refused one is
// an error wrapping broker.ErrInvalidArgument, and an accepted one has a
// database, a TCP address and the connect timeout.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{
		"mysql://root@127.0.0.1:3306/test?geodlq_table=dl&lease_ttl=1s&max_message_bytes=10",
		"mysql://u:p%40ss@[::1]/db?tls=skip-verify&readTimeout=1m",
		"mysql://h/db?geodlq_x=1", "mysql:///db", "mysql://h:99999/db?charset=%zz",
		"mysql://h/db?lease_ttl=9999999999h&max_message_bytes=99999999999999999999",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := broker.ParseStoreURL(raw)
		if err != nil {
			return
		}
		cfg, o, err := parseURL(u, broker.OpenOptions{ConnectTimeout: time.Second})
		if err != nil {
			require.True(t, errors.Is(err, broker.ErrInvalidArgument), "%q: %v", raw, err)
			return
		}
		require.NotEmpty(t, cfg.DBName)
		require.Equal(t, "tcp", cfg.Net)
		require.NotEmpty(t, cfg.Addr)
		require.Equal(t, time.Second, cfg.Timeout)
		require.GreaterOrEqual(t, o.MaxMessageBytes, 0)
		require.GreaterOrEqual(t, o.LeaseTTL, time.Duration(0))
	})
}
