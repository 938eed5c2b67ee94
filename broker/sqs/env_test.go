package sqs_test

import (
	"net"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
)

// defaultEndpoint is where scripts/local-sqs.sh starts local-aws-sqs.
const defaultEndpoint = "http://127.0.0.1:9324"

// endpoint returns the URL of the SQS test server (GEODLQ_TEST_SQS, default
// defaultEndpoint). Like internal/testenv, it skips loudly when the server
// is unreachable, and fails instead when GEODLQ_REQUIRE_SERVICES is set.
func endpoint(tb testing.TB) string {
	tb.Helper()
	raw := os.Getenv("GEODLQ_TEST_SQS")
	if raw == "" {
		raw = defaultEndpoint
	}
	u, err := url.Parse(raw)
	if err != nil {
		tb.Fatalf("GEODLQ_TEST_SQS: bad URL %q: %v", raw, err)
	}
	c, err := net.DialTimeout("tcp", u.Host, 3*time.Second)
	if err == nil {
		_ = c.Close()
		return raw
	}
	if os.Getenv("GEODLQ_REQUIRE_SERVICES") != "" {
		tb.Fatalf("SQS (local-aws-sqs) at %s is unreachable (%v); run scripts/local-sqs.sh", raw, err)
	}
	tb.Skipf("SKIPPING: SQS (local-aws-sqs) at %s is unreachable (%v); run scripts/local-sqs.sh or set GEODLQ_REQUIRE_SERVICES=1 to fail instead", raw, err)
	return ""
}

// newClient returns a real SDK client for the test server, with dummy
// credentials (requests are signed as against AWS).
func newClient(tb testing.TB) *awssqs.Client {
	tb.Helper()
	return awssqs.New(awssqs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint(tb)),
		Credentials:  credentials.NewStaticCredentialsProvider("geodlq", "geodlq", ""),
	})
}
