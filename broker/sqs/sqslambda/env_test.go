package sqslambda_test

import (
	"context"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"
)

// endpoint returns local-aws-sqs's URL (GEODLQ_TEST_SQS, default where
// scripts/local-sqs.sh starts it); it skips loudly when the server is
// unreachable and fails instead under GEODLQ_REQUIRE_SERVICES.
func endpoint(tb testing.TB) string {
	tb.Helper()
	raw := os.Getenv("GEODLQ_TEST_SQS")
	if raw == "" {
		raw = "http://127.0.0.1:9324"
	}
	u, err := url.Parse(raw)
	require.NoError(tb, err)
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

func newClient(tb testing.TB) *awssqs.Client {
	tb.Helper()
	return awssqs.New(awssqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(endpoint(tb)),
		Credentials: credentials.NewStaticCredentialsProvider("geodlq", "geodlq", "")})
}

func queueName(t *testing.T, suffix string) string {
	t.Helper()
	base := strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())
	if len(base) > 40 {
		base = base[len(base)-40:]
	}
	return strings.Trim(base, "-") + "-" + strconv.FormatInt(time.Now().UnixNano(), 36) + suffix
}

// createQueue creates a queue and returns its URL and ARN.
func createQueue(t *testing.T, client *awssqs.Client, name string, attrs map[string]string) (string, string) {
	t.Helper()
	if strings.HasSuffix(name, ".fifo") {
		if attrs == nil {
			attrs = map[string]string{}
		}
		attrs["FifoQueue"] = "true"
	}
	out, err := client.CreateQueue(context.Background(), &awssqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	require.NoError(t, err)
	a, err := client.GetQueueAttributes(context.Background(), &awssqs.GetQueueAttributesInput{QueueUrl: out.QueueUrl,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	require.NoError(t, err)
	return aws.ToString(out.QueueUrl), a.Attributes["QueueArn"]
}

// runAWS runs Debian's aws CLI (/usr/bin/aws) against the test server.
func runAWS(t *testing.T, args ...string) []byte {
	t.Helper()
	const path = "/usr/bin/aws"
	if _, err := os.Stat(path); err != nil {
		if os.Getenv("GEODLQ_REQUIRE_SERVICES") != "" {
			t.Fatalf("%s is missing (apt-get install awscli): %v", path, err)
		}
		t.Skipf("SKIPPING: %s is missing (apt-get install awscli): %v", path, err)
	}
	cmd := exec.Command(path, append([]string{"--endpoint-url", endpoint(t), "--region", "us-east-1", "--output", "json"}, args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AWS_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "AWS_ACCESS_KEY_ID=geodlq", "AWS_SECRET_ACCESS_KEY=geodlq",
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null", "AWS_PAGER=", "AWS_EC2_METADATA_DISABLED=true")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "aws %s: %s", strings.Join(args, " "), out)
	return out
}
