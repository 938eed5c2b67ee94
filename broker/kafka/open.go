package kafka

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/geodlq/geodlq/broker"
)

func init() {
	broker.RegisterStore("kafka", open)
}

// maxSeeds bounds the seed brokers of a URL.
const maxSeeds = 64

// open is the kafka:// opener (see the package doc for the URL form).
func open(ctx context.Context, u *url.URL, raw string, opts broker.OpenOptions) (*broker.Store, error) {
	seeds, err := seedsOf(raw)
	if err != nil {
		return nil, err
	}
	o := Options{StoreOptions: opts.Store}
	var topics TopicOptions
	q := u.Query()
	for name, vs := range q {
		v := vs[len(vs)-1]
		var perr error
		switch name {
		case "lease_ttl":
			o.LeaseTTL, perr = positiveDuration(v)
		case "join_wait":
			o.JoinWait, perr = positiveDuration(v)
		case "max_message_bytes":
			o.MaxMessageBytes, perr = positiveInt(v, 1<<30)
		case "header_budget":
			o.HeaderBudget, perr = positiveInt(v, 1<<20)
		case "partitions":
			var n int
			n, perr = positiveInt(v, 1<<20)
			topics.Partitions = int32(n)
		case "replication_factor":
			var n int
			n, perr = positiveInt(v, 1<<15-1)
			topics.ReplicationFactor = int16(n)
		default:
			perr = errors.New("unknown parameter (known: lease_ttl, join_wait, max_message_bytes, header_budget, partitions, replication_factor)")
		}
		if perr != nil {
			return nil, fmt.Errorf("kafka: URL parameter %s=%q: %v: %w", name, v, perr, broker.ErrInvalidArgument)
		}
	}
	if opts.Create && !opts.ReadOnly {
		o.Topics = &topics
	}
	timeout := opts.ConnectTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	cl, err := kgo.NewClient(append(ProducerOpts(&o), kgo.SeedBrokers(seeds...), kgo.DialTimeout(timeout))...)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	if err := probe(ctx, cl, timeout); err != nil {
		cl.Close()
		return nil, err
	}
	d, o, err := newDriver(cl, &o)
	if err != nil {
		cl.Close()
		return nil, err
	}
	d.readOnly, d.ownsCl = opts.ReadOnly, true
	return broker.NewStore("kafka", d, &o.StoreOptions), nil
}

// probe asks the cluster for its brokers within timeout: a seed that
// accepts connections but never answers fails here, not at the first
// operation. The request runs on its own goroutine and probe returns when
// ctx ends, whatever the client does: franz-go before v1.22 reads a new
// connection's first answer (ApiVersions) under its own request timeout,
// not the caller's context. The caller closes the client, which ends the
// request.
func probe(ctx context.Context, cl *kgo.Client, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{} // no topics: the brokers only
	type answer struct {
		resp *kmsg.MetadataResponse
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := req.RequestWith(ctx, cl)
		done <- answer{resp, err}
	}()
	var resp *kmsg.MetadataResponse
	var err error
	select {
	case a := <-done:
		resp, err = a.resp, a.err
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err == nil && len(resp.Brokers) == 0 {
		err = errors.New("the cluster reports no brokers")
	}
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("kafka: no answer from the brokers within %v: %w", timeout, errors.Join(ctx.Err(), err))
		}
		return fmt.Errorf("kafka: connecting: %w", err)
	}
	return nil
}

// seedsOf returns the host:port list of a kafka:// URL.
func seedsOf(raw string) ([]string, error) {
	_, rest, _ := strings.Cut(raw, "://")
	rest, _, _ = strings.Cut(rest, "?")
	hosts, path, _ := strings.Cut(rest, "/")
	if path != "" {
		return nil, fmt.Errorf("kafka: the URL names brokers only (kafka://host:9092[,host:9092…]), not a path %q: %w", path, broker.ErrInvalidArgument)
	}
	if strings.Contains(hosts, "@") {
		return nil, fmt.Errorf("kafka: credentials in the URL are not supported (build the client with kgo.SASL and call kafka.New): %w", broker.ErrInvalidArgument)
	}
	var seeds []string
	for h := range strings.SplitSeq(hosts, ",") {
		if h = strings.TrimSpace(h); h == "" {
			continue
		}
		seeds = append(seeds, h)
	}
	switch {
	case len(seeds) == 0:
		return nil, fmt.Errorf("kafka: no brokers (want kafka://host:9092[,host:9092…]): %w", broker.ErrInvalidArgument)
	case len(seeds) > maxSeeds:
		return nil, fmt.Errorf("kafka: %d seed brokers (limit %d): %w", len(seeds), maxSeeds, broker.ErrInvalidArgument)
	}
	return seeds, nil
}

func positiveDuration(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, err
	}
	if d <= 0 {
		return 0, errors.New("must be positive")
	}
	return d, nil
}

func positiveInt(v string, limit int) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, err
	}
	if n <= 0 || n > limit {
		return 0, fmt.Errorf("must be in 1..%d", limit)
	}
	return n, nil
}
