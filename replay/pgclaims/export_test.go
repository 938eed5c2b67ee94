package pgclaims

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
)

// VersionForTest returns the schema version of the claims table.
func (c *Claims) VersionForTest(ctx context.Context) (int, error) { return c.version(ctx) }

// PoolForTest returns the store's pool.
func (c *Claims) PoolForTest() *pgxpool.Pool { return c.pool }
