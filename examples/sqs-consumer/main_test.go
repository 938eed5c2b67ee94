package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// sqsEndpoint finds local-aws-sqs as broker/sqs's tests do: skip loudly
// when it is unreachable, fail when GEODLQ_REQUIRE_SERVICES is set.
func sqsEndpoint(t *testing.T) string {
	t.Helper()
	raw := os.Getenv("GEODLQ_TEST_SQS")
	if raw == "" {
		raw = "http://127.0.0.1:9324"
	}
	u, err := url.Parse(raw)
	require.NoError(t, err)
	if c, err := net.DialTimeout("tcp", u.Host, 3*time.Second); err == nil {
		_ = c.Close()
		return raw
	} else if os.Getenv("GEODLQ_REQUIRE_SERVICES") != "" {
		t.Fatalf("local-aws-sqs at %s is unreachable (%v); run scripts/local-sqs.sh", raw, err)
	} else {
		t.Skipf("SKIPPING: local-aws-sqs at %s is unreachable (%v); run scripts/local-sqs.sh", raw, err)
	}
	return ""
}

func TestDemo(t *testing.T) {
	var out bytes.Buffer
	c := config{endpoint: sqsEndpoint(t), maxReceiveCount: 4, longestOp: 12 * time.Second, offloadDir: t.TempDir()}
	require.NoError(t, demo(context.Background(), c, io.MultiWriter(&out, demoOutput(t)), slog.New(slog.DiscardHandler)))
	s := out.String()
	require.Contains(t, s, `\"maxReceiveCount\":\"4\"`)
	require.Contains(t, s, `"VisibilityTimeout": "72"`)
	require.Contains(t, s, "dead-letter queue: 3 records")
	for _, want := range []string{"invalid_geometry", "Self-intersection", "crs_mismatch", "schema_violation"} {
		require.Contains(t, s, want)
	}
}

func TestSettingsRefused(t *testing.T) {
	var out bytes.Buffer
	_, err := printSettings(&out, config{queueURL: "jobs.fifo", dlqARN: "arn:aws:sqs:us-east-1:1:dlq", maxReceiveCount: 4}, slog.New(slog.DiscardHandler))
	require.ErrorContains(t, err, "FIFO")
	_, err = printSettings(&out, config{queueURL: "jobs", dlqARN: "arn:aws:sqs:us-east-1:1:dlq", maxReceiveCount: 1001}, slog.New(slog.DiscardHandler))
	require.ErrorContains(t, err, "maxReceiveCount 1001")
	require.Error(t, run(context.Background(), config{}, &out, slog.New(slog.DiscardHandler)))
}
