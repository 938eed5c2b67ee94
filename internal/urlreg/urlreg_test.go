package urlreg_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/internal/urlreg"
)

func TestRegistry(t *testing.T) {
	var r urlreg.Registry[int]
	r.Register("test: Register", "postgres", 1)
	r.Register("test: Register", "sqlite", 2)
	require.Panics(t, func() { r.Register("test: Register", "sqlite", 3) })
	for _, bad := range []string{"", "Bad", "1x", "a b", "a:b"} {
		require.Panics(t, func() { r.Register("test: Register", bad, 0) }, bad)
	}
	v, ok := r.Lookup("sqlite")
	require.True(t, ok)
	require.Equal(t, 2, v)
	_, ok = r.Lookup("mysql")
	require.False(t, ok)
	require.Equal(t, []string{"postgres", "sqlite"}, r.Schemes())
}

func TestUnknownScheme(t *testing.T) {
	sentinel := errors.New("unknown")
	known := []string{"kafka", "postgres", "postgresql", "redis", "sqlite"}
	for _, tc := range []struct{ in, hint string }{
		{"postgress", `did you mean "postgres"?`},
		{"sqllite", `did you mean "sqlite"?`},
		{"redis2", `did you mean "redis"?`},
		{"zzzzzzzzzzzz", ""},
	} {
		err := urlreg.UnknownScheme(tc.in, known, sentinel)
		require.ErrorIs(t, err, sentinel)
		if tc.hint == "" {
			require.NotContains(t, err.Error(), "did you mean")
		} else {
			require.Contains(t, err.Error(), tc.hint)
		}
		require.Contains(t, err.Error(), "known: kafka, postgres")
	}
}

func TestParseAndRedact(t *testing.T) {
	u, ok := urlreg.Parse("sqlite://./a b%zz.db")
	require.True(t, ok)
	require.Equal(t, "sqlite", u.Scheme)
	require.Equal(t, "./a b%zz.db", u.Opaque)
	_, ok = urlreg.Parse("dlq.db")
	require.False(t, ok)
	_, ok = urlreg.Parse("://x")
	require.False(t, ok)
	require.Equal(t, "postgres://u:xxxxx@h/db?…", urlreg.Redact("postgres://u:secret@h/db?sslkey=k"))
	require.Equal(t, "s3://bucket?…", urlreg.Redact("s3://bucket?access_key=AKIA"))
	require.Equal(t, "file:///x", urlreg.Redact("file:///x"))
}
