package postgis_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker/postgis"
	"github.com/geodlq/geodlq/internal/pgtest"
)

// newStore returns a migrated store in a schema of its own.
func newStore(t *testing.T, opts *postgis.Options) *postgis.Store {
	t.Helper()
	var o postgis.Options
	if opts != nil {
		o = *opts
	}
	if o.Schema == "" {
		o.Schema = pgtest.Schema(t)
	}
	o.Migrate = true
	s, err := postgis.New(context.Background(), pgtest.NewPool(t, 4), &o)
	require.NoError(t, err)
	return s
}
