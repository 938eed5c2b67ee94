package mysqlclaims_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/geodlq/geodlq/broker/mysql/mysqlclaims"
	"github.com/geodlq/geodlq/replay"
)

// A consumer of replayed events runs each side effect once per
// idempotency key, whichever worker gets the event and however often it
// comes. (It needs a server: compiled, not run.)
func Example() {
	ctx := context.Background()
	db, err := sql.Open("mysql", "app:secret@tcp(127.0.0.1:3306)/pipeline?parseTime=true&timeout=10s")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	claims, err := mysqlclaims.New(ctx, db, &mysqlclaims.Options{Create: true})
	if err != nil {
		log.Fatal(err)
	}
	res, err := replay.Once(ctx, claims, "idem:v1:4f2a…", 5*time.Minute, func(ctx context.Context) error {
		return nil // the side effect: an UPSERT, an HTTP call, a publish
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("ran:", res.Ran)
}
