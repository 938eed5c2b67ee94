package mysql_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/broker/mysql"
	"github.com/geodlq/geodlq/broker/mysql/internal/mysqltest"
)

const testLease = time.Second

// harness is one scratch database; every handle is a pool of its own, as
// another process would have.
type harness struct {
	cfg   *gomysql.Config
	pools []*sql.DB
}

func newHarness(_ context.Context, t *testing.T) (brokertest.Harness, error) {
	return &harness{cfg: mysqltest.Database(t)}, nil
}

func (h *harness) open(ctx context.Context) (*broker.Store, error) {
	c, err := gomysql.NewConnector(h.cfg)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(c)
	db.SetMaxIdleConns(16)
	h.pools = append(h.pools, db)
	return mysql.New(ctx, db, &mysql.Options{Create: true,
		StoreOptions: broker.StoreOptions{LeaseTTL: testLease, MaxMessageBytes: 64 << 10}})
}

func (h *harness) MakeStore(ctx context.Context) (*broker.Store, error) { return h.open(ctx) }
func (h *harness) Reopen(ctx context.Context) (*broker.Store, error)    { return h.open(ctx) }

func (h *harness) Capabilities() brokertest.Capabilities {
	return brokertest.Capabilities{LeaseExpiry: testLease, MaxMessageBytes: 64 << 10}
}

func (h *harness) Close() {
	for _, db := range h.pools {
		_ = db.Close()
	}
}

func TestConformance(t *testing.T) {
	brokertest.RunConformanceTests(t, newHarness)
}

func TestConsumerConformance(t *testing.T) {
	brokertest.RunConsumerTests(t, func(ctx context.Context, t *testing.T) (brokertest.ConsumerHarness, error) {
		db := mysqltest.NewDB(t)
		s, err := mysql.New(ctx, db, &mysql.Options{Create: true, StoreOptions: broker.StoreOptions{LeaseTTL: testLease}})
		if err != nil {
			return nil, err
		}
		return brokertest.StoreConsumerHarness(s, "source", testLease, func(s *broker.Store, d string, proc *broker.Processor) (*broker.Consumer, error) {
			return mysql.NewConsumer(s, d, proc, &mysql.ConsumerOptions{PollInterval: 20 * time.Millisecond,
				ConsumerOptions: broker.ConsumerOptions{Concurrency: 4}})
		}), nil
	})
}
