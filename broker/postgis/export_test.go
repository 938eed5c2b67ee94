package postgis

import (
	"context"
	"github.com/geodlq/geodlq/pgmigrate"

	"github.com/geodlq/geodlq/broker"
)

// WriteResult is what the tests learn from writeForTest.
type WriteResult struct {
	ID             int64
	Duplicate      bool
	GeometryStatus string
	GeometryError  string
}

// WriteForTest runs the driver's INSERT directly and reports what it did:
// the row, whether it was a duplicate, and the geometry's fate.
func WriteForTest(ctx context.Context, s *broker.Store, destination string, m *broker.Message) (WriteResult, error) {
	r, err := driverOf(s).write(ctx, destination, m)
	return WriteResult{ID: r.id, Duplicate: r.duplicate, GeometryStatus: r.geomStatus, GeometryError: r.geomError}, err
}

// VersionForTest returns the schema version of the store's table.
func VersionForTest(ctx context.Context, s *broker.Store) (int, error) {
	return driverOf(s).readVersion(ctx)
}

// Geometry statuses, for the tests.
const (
	GeomParsed      = geomParsed
	GeomUnparseable = geomUnparseable
	GeomNotText     = geomNotText
	GeomMissing     = geomMissing
	GeomOffloaded   = geomOffloaded
	GeomNone        = geomNone
)

// MigrateToForTest applies the store's first upTo migrations to the
// table of s (made by New without Create), as an older geodlq did.
func MigrateToForTest(ctx context.Context, s *broker.Store, upTo int) error {
	d := driverOf(s)
	return pgmigrate.Migrate(ctx, d.pool, d.migrationTarget(), migrations[:upTo])
}

// CompactForTest folds the count log into the counts.
func CompactForTest(ctx context.Context, s *broker.Store) error {
	return driverOf(s).compact(ctx)
}
