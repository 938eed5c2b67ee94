package mysql_test

import (
	"context"
	"database/sql"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/broker/mysql"
	"github.com/geodlq/geodlq/broker/mysql/internal/mysqltest"
)

// storeURL is the mysql:// URL of the scratch database db on the test
// server, with query.
func storeURL(t *testing.T, query string) (string, *sql.DB) {
	cfg := mysqltest.Database(t)
	u := url.URL{Scheme: "mysql", Host: cfg.Addr, Path: "/" + cfg.DBName, RawQuery: query}
	if cfg.Passwd != "" {
		u.User = url.UserPassword(cfg.User, cfg.Passwd)
	} else {
		u.User = url.User(cfg.User)
	}
	return u.String(), mysqltest.Open(t, cfg)
}

func TestOpenStore(t *testing.T) {
	ctx := context.Background()
	require.Contains(t, broker.StoreSchemes(), "mysql")
	raw, db := storeURL(t, "geodlq_table=dl&lease_ttl=750ms&max_message_bytes=4096")

	_, err := broker.OpenStore(ctx, raw, nil)
	require.ErrorIs(t, err, broker.ErrNoStore, "without Create a database without the table is no store")
	_, err = broker.OpenStore(ctx, raw, &broker.OpenOptions{ReadOnly: true, Create: true})
	require.ErrorIs(t, err, broker.ErrNoStore, "read-only never creates")
	require.Zero(t, tableCount(t, db), "nothing was written")

	s, err := broker.OpenStore(ctx, raw, &broker.OpenOptions{Create: true})
	require.NoError(t, err)
	require.Equal(t, "mysql", s.Name())
	require.Equal(t, 4096, s.MaxMessageBytes("d"), "max_message_bytes")
	var got *sql.DB
	require.True(t, s.As(&got), "As reaches the pool the opener made")
	require.NoError(t, s.Publish(ctx, "d", brokertest.Message(t, brokertest.SampleInputs()[0])))
	recs, err := s.Fetch(ctx, "d", broker.Filter{}, 1)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	var left float64
	require.NoError(t, db.QueryRow("SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), lease_until) / 1e6 FROM `dl`").Scan(&left))
	require.InDelta(t, 0.75, left, 0.3, "lease_ttl")
	require.NoError(t, s.Ack(ctx, recs[0]))
	require.NoError(t, s.Close())
	require.Error(t, got.PingContext(ctx), "closing the store closes the pool its opener made")

	ro, err := broker.OpenStore(ctx, raw, &broker.OpenOptions{ReadOnly: true})
	require.NoError(t, err)
	defer ro.Close()
	p, err := ro.List(ctx, broker.ListOptions{IncludeReplayed: true})
	require.NoError(t, err)
	require.Len(t, p.Entries, 1)
	require.Equal(t, broker.StatusReplayed, p.Entries[0].Status)
	require.ErrorIs(t, ro.Publish(ctx, "d", &broker.Message{Body: []byte("x")}), broker.ErrReadOnly)
}

// TestOpenNotAStore: a database that is not a store (missing, or holding
// a foreign table of the store's name) is ErrNoStore, read-only or not,
// and is left as it was.
func TestOpenNotAStore(t *testing.T) {
	ctx := context.Background()
	raw, db := storeURL(t, "")
	_, err := db.Exec("CREATE TABLE `" + mysql.DefaultTable + "` (id INT PRIMARY KEY, note TEXT)")
	require.NoError(t, err)
	for _, o := range []*broker.OpenOptions{{ReadOnly: true}, {Create: true}, nil} {
		_, err := broker.OpenStore(ctx, raw, o)
		require.ErrorIs(t, err, broker.ErrNoStore)
	}
	require.Equal(t, 1, tableCount(t, db), "nothing created")
	var cols int
	require.NoError(t, db.QueryRow(`SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?`, mysql.DefaultTable).Scan(&cols))
	require.Equal(t, 2, cols, "nor altered")

	u, err := url.Parse(raw)
	require.NoError(t, err)
	u.Path = "/geodlq_no_such_database"
	_, err = broker.OpenStore(ctx, u.String(), &broker.OpenOptions{ReadOnly: true})
	require.ErrorIs(t, err, broker.ErrNoStore, "a database that does not exist")
}

// TestOpenConnectTimeout: a server that accepts TCP connections and never
// answers fails the open within ConnectTimeout.
func TestOpenConnectTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	held := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held <- c // accepted, never answered
		}
	}()
	defer func() {
		for len(held) > 0 {
			_ = (<-held).Close()
		}
	}()
	for _, o := range []broker.OpenOptions{{ConnectTimeout: 300 * time.Millisecond}, {ConnectTimeout: 300 * time.Millisecond, ReadOnly: true}} {
		start := time.Now()
		_, err = broker.OpenStore(context.Background(), "mysql://root@"+ln.Addr().String()+"/test", &o)
		require.Error(t, err)
		require.ErrorContains(t, err, "connect timeout")
		require.Less(t, time.Since(start), 2*time.Second, "gave up within the connect timeout")
	}
}

func TestOpenURLErrors(t *testing.T) {
	ctx := context.Background()
	for _, raw := range []string{
		"mysql://root@127.0.0.1:3306/",                                 // no database
		"mysql://root@127.0.0.1:3306/a/b",                              // not a database name
		"mysql://root@127.0.0.1:3306/test?lease_ttl=soon",              // not a duration
		"mysql://root@127.0.0.1:3306/test?lease_ttl=-1s",               // not positive
		"mysql://root@127.0.0.1:3306/test?max_message_bytes=lots",      // not a number
		"mysql://root@127.0.0.1:3306/test?max_message_bytes=0",         // not positive
		"mysql://root@127.0.0.1:3306/test?geodlq_schema=x",             // not ours
		"mysql://root@127.0.0.1:3306/test?readTimeout=forever",         // the driver refuses it
		"mysql://root@127.0.0.1:3306/test?geodlq_table=Dead%2DLetters", // not an identifier
		"mysql://ro ot@127.0.0.1:3306/test",                            // net/url refuses it: kept opaque
	} {
		t.Run(raw, func(t *testing.T) {
			start := time.Now()
			_, err := broker.OpenStore(ctx, raw, &broker.OpenOptions{ConnectTimeout: 5 * time.Second})
			require.Error(t, err)
			require.ErrorIs(t, err, broker.ErrInvalidArgument)
			require.Less(t, time.Since(start), 5*time.Second)
		})
	}
}
