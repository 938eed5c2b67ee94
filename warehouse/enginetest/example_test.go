package enginetest

import (
	"context"
	"database/sql"
	"fmt"
	"os"

	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/warehouse"
	"github.com/geodlq/geodlq/warehouse/internal/fixture"
)

// The seed's question — failures by source-URI prefix and class, per week —
// asked of a synced dataset with DuckDB.
func Example_weeklyFailuresByPrefix() {
	ctx := context.Background()
	store := memory.New(nil)
	_ = fixture.Fill(ctx, store, "vector-dlq", 400, nil)
	dir, _ := os.MkdirTemp("", "dlq-warehouse-")
	defer os.RemoveAll(dir)
	if _, err := warehouse.Sync(ctx, store, dir, nil); err != nil {
		fmt.Println(err)
		return
	}
	db, _ := sql.Open("duckdb", "")
	defer db.Close()
	rows, err := db.Query(`SELECT strftime(date_trunc('week', dead_lettered_date), '%Y-%m-%d') AS week,
		coalesce(source_prefix, '(none)') AS prefix, class, count(*) AS failures
		FROM read_parquet('` + dir + `/**/*.parquet', hive_partitioning = true)
		WHERE class IN ('crs_mismatch', 'schema_violation') AND source_prefix = 's3://provider-b'
		GROUP BY ALL ORDER BY week, class`)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var week, prefix, class string
		var n int
		_ = rows.Scan(&week, &prefix, &class, &n)
		fmt.Println(week, prefix, class, n)
	}
	// Output:
	// 2026-03-02 s3://provider-b crs_mismatch 16
	// 2026-03-02 s3://provider-b schema_violation 9
	// 2026-03-09 s3://provider-b crs_mismatch 10
	// 2026-03-09 s3://provider-b schema_violation 4
}
