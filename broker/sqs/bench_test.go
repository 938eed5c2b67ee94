package sqs_test

import (
	"context"
	"encoding/base64"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	geosqs "github.com/geodlq/geodlq/broker/sqs"
	"github.com/geodlq/geodlq/internal/benchenv"
)

// openBench returns a store with the conformance harness's options on a
// new SDK client, a standard queue of its own (created by the store,
// deleted at the end), its URL and the client.
func openBench(b *testing.B) (*broker.Store, string, string, *awssqs.Client) {
	b.Helper()
	ctx := context.Background()
	c := newClient(b)
	s, err := geosqs.New(ctx, c, harnessOpts)
	require.NoError(b, err)
	dest := benchenv.Name("bench-dlq")
	qurl, err := geosqs.QueueURL(ctx, s, dest)
	require.NoError(b, err)
	b.Cleanup(func() {
		_ = s.Close()
		_, _ = c.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: aws.String(qurl)})
	})
	return s, dest, qurl, c
}

// BenchmarkWrite publishes 2 KiB dlq.v1 envelopes, one at a time (a
// lone Publish goes out at once as SendMessage), each stored when Publish
// returns.
func BenchmarkWrite(b *testing.B) {
	set := benchenv.New(b)
	s, dest, _, _ := openBench(b)
	set.Loop(b, func(ctx context.Context, _ int, m *broker.Message) error {
		return s.Publish(ctx, dest, m)
	})
}

// BenchmarkReplay fetches (ReceiveMessage, 10 at a time, 100 per Fetch)
// and acknowledges (DeleteMessage) envelopes.
func BenchmarkReplay(b *testing.B) {
	set := benchenv.New(b)
	s, dest, _, _ := openBench(b)
	set.Replay(b, s, s, dest)
}

// BenchmarkBareClientWrite is the ceiling: the AWS SDK's SendMessage of
// the same body and message attributes (the envelope's headers and the
// key) to a queue made by the store.
func BenchmarkBareClientWrite(b *testing.B) {
	set := benchenv.New(b)
	_, _, qurl, c := openBench(b)
	str := func(v string) types.MessageAttributeValue {
		return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	set.Loop(b, func(ctx context.Context, _ int, m *broker.Message) error {
		attrs := make(map[string]types.MessageAttributeValue, len(m.Headers)+1)
		for k, v := range m.Headers {
			attrs[k] = str(v)
		}
		attrs[geosqs.HeaderKey] = str(base64.StdEncoding.EncodeToString(m.Key))
		_, err := c.SendMessage(ctx, &awssqs.SendMessageInput{
			QueueUrl: aws.String(qurl), MessageBody: aws.String(string(m.Body)), MessageAttributes: attrs,
		})
		return err
	})
}
