package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/sqlite"
)

// TestNewConsumerArguments: what NewConsumer refuses, and that it takes
// the zero options.
func TestNewConsumerArguments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "c.db"), nil)
	require.NoError(t, err)
	defer s.Close()
	proc, err := broker.NewProcessor(&broker.ProcessorOptions{Publisher: s})
	require.NoError(t, err)
	tests := []struct {
		name  string
		store *broker.Store
		dest  string
	}{
		{"nil store", nil, "d"},
		{"empty destination", s, ""},
		{"control character", s, "d\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := sqlite.NewConsumer(tt.store, tt.dest, proc, nil)
			require.ErrorIs(t, err, broker.ErrInvalidArgument)
		})
	}
	c, err := sqlite.NewConsumer(s, "d", proc, nil)
	require.NoError(t, err)
	require.NoError(t, c.Close())
}
