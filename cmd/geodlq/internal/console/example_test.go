package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"github.com/geodlq/geodlq/broker"
	_ "github.com/geodlq/geodlq/broker/sqlite" // sqlite://
	"github.com/geodlq/geodlq/cmd/geodlq/internal/console"
)

// A read-only console over a SQLite store, asked for its settings as a
// script would.
func Example() {
	dir, _ := os.MkdirTemp("", "geodlq-console-example-")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	url := "sqlite://" + filepath.Join(dir, "dlq.db")
	if s, err := broker.OpenStore(ctx, url, &broker.OpenOptions{Create: true}); err == nil {
		_ = s.Close() // an empty store
	}
	store, err := broker.OpenStore(ctx, url, &broker.OpenOptions{ReadOnly: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	srv, err := console.New(console.Options{Store: store, Label: "sqlite://dlq.db"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	for !srv.Ready() {
		time.Sleep(10 * time.Millisecond)
	}
	hs := httptest.NewServer(srv) // geodlq serve listens on 127.0.0.1:8080
	defer hs.Close()

	res, err := http.Get(hs.URL + "/api/config")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer res.Body.Close()
	var cfg struct {
		Store    string `json:"store"`
		ReadOnly bool   `json:"read_only"`
		Index    struct {
			Records int `json:"records"`
		} `json:"index"`
	}
	_ = json.NewDecoder(res.Body).Decode(&cfg)
	fmt.Println(cfg.Store, "read-only:", cfg.ReadOnly, "records:", cfg.Index.Records)
	fmt.Println(res.Header.Get("Content-Security-Policy")[:40])

	// Output:
	// sqlite://dlq.db read-only: true records: 0
	// default-src 'none'; script-src 'self'; s
}
