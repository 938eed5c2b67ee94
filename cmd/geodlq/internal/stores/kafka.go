package stores

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/geodlq/geodlq/broker/kafka"
)

// kafka://HOST:PORT[,HOST:PORT…]?lease_ttl=5m&join_wait=10s opens the Kafka
// store (broker/kafka): dead-letter topics read through the consumer group
// geodlq-replay.<topic>, so an acknowledged record is a committed offset.
// Kafka cannot list without consuming, so --dest is required and list,
// stats, export and verify lease records and release them. Commands that
// may create the store create missing dead-letter topics.
func init() {
	register("kafka", openKafka)
}

func openKafka(_ context.Context, u *url.URL, raw string, opts Options) (Store, error) {
	hosts, _, _ := strings.Cut(afterScheme(raw), "/")
	if hosts == "" {
		return nil, errors.New("kafka: no brokers (want kafka://host:9092[,host:9092])")
	}
	o := &kafka.Options{Logger: opts.Logger}
	if opts.Create {
		o.Topics = &kafka.TopicOptions{}
	}
	q := u.Query()
	for name, dst := range map[string]*time.Duration{"lease_ttl": &o.LeaseTTL, "join_wait": &o.JoinWait} {
		if v := q.Get(name); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				return nil, fmt.Errorf("kafka: %s: %w", name, err)
			}
			*dst = d
		}
	}
	cl, err := kgo.NewClient(append(kafka.ProducerOpts(o), kgo.SeedBrokers(strings.Split(hosts, ",")...))...)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	s, err := kafka.New(cl, o)
	if err != nil {
		cl.Close()
		return nil, err
	}
	return kafkaStore{s, cl}, nil
}

type kafkaStore struct {
	*kafka.Store
	cl *kgo.Client
}

// Close leaves the replay groups, then closes the client.
func (k kafkaStore) Close() error {
	err := k.Store.Close()
	k.cl.Close()
	return err
}
