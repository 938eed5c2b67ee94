// Package enginetest reads what package warehouse writes with real
// engines — DuckDB through github.com/duckdb/duckdb-go/v2, and the
// GeoParquet 1.1 JSON Schema through github.com/santhosh-tekuri/jsonschema
// — against real stores (SQLite, and PostGIS on the test server), and
// drives the geodlq command as an operator would.
//
// It is a module of its own that nothing imports, so that no user of
// geodlq links DuckDB. Its tests need the PostgreSQL server of the test
// environment (GEODLQ_REQUIRE_SERVICES=1 makes its absence a failure) and
// build the geodlq command from the workspace. Run them from the
// repository root:
//
//	go test ./warehouse/enginetest/
//	go test -run '^$' -bench . -benchtime 1x ./warehouse/enginetest/
package enginetest
