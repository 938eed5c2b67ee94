package sqs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Redrive policy bounds (see [RedriveConfig]).
const (
	// SQS's bounds of maxReceiveCount.
	minMaxReceiveCount, maxMaxReceiveCount = 1, 1000
	// The seed's advice for vector workloads: 3 to 5. Below, a
	// rate-limited tile server's transient failure is dead-lettered too
	// soon; above, broken geometries burn compute.
	recommendedMinReceiveCount, recommendedMaxReceiveCount = 3, 5
	// defaultMaxReceiveCount is 4, the seed's recommendation.
	defaultMaxReceiveCount = 4
	// minVisibilityTimeout is the least visibility timeout
	// VisibilityTimeoutFor returns: 30s, SQS's default.
	minVisibilityTimeout = 30 * time.Second
)

// VisibilityFactor multiplies the longest expected spatial operation to
// give a source queue's visibility timeout: 6, AWS's advice for Lambda
// consumers (6 × the function timeout).
const VisibilityFactor = 6

// ErrInvalidRedrive is wrapped by [*MaxReceiveCountError] and
// [*VisibilityTimeoutError].
var ErrInvalidRedrive = errors.New("sqs: invalid redrive settings")

// MaxReceiveCountError reports a maxReceiveCount outside SQS's 1–1000.
type MaxReceiveCountError struct{ Value int }

func (e *MaxReceiveCountError) Error() string {
	return fmt.Sprintf("sqs: maxReceiveCount %d outside SQS's %d..%d (the seed recommends %d..%d)",
		e.Value, minMaxReceiveCount, maxMaxReceiveCount, recommendedMinReceiveCount, recommendedMaxReceiveCount)
}

// Unwrap returns [ErrInvalidRedrive].
func (e *MaxReceiveCountError) Unwrap() error { return ErrInvalidRedrive }

// VisibilityTimeoutError reports a spatial operation no visibility timeout
// can cover: SQS keeps a message invisible for at most 12 h.
type VisibilityTimeoutError struct{ LongestOperation time.Duration }

func (e *VisibilityTimeoutError) Error() string {
	return fmt.Sprintf("sqs: a %v operation exceeds SQS's 12h maximum visibility timeout; split the work", e.LongestOperation)
}

// Unwrap returns [ErrInvalidRedrive].
func (e *VisibilityTimeoutError) Unwrap() error { return ErrInvalidRedrive }

// VisibilityTimeoutFor returns the visibility timeout for a source queue
// whose longest expected spatial operation (reprojecting a dense
// multipolygon: 8–12 s on a cold Lambda, says the seed) takes longest:
// VisibilityFactor × longest, rounded up to whole seconds, at least
// 30s (SQS's default) and at most 12h. The factor leaves room for the
// processor's in-place retries and their backoff, which run while the
// message is invisible; a consumer's lease extension
// (ConsumerOptions.ExtendEvery) extends it further when needed. An operation of 12 h or more is refused with a
// *[VisibilityTimeoutError].
func VisibilityTimeoutFor(longest time.Duration) (time.Duration, error) {
	if longest >= maxVisibilityTimeout {
		return 0, &VisibilityTimeoutError{LongestOperation: longest}
	}
	if longest < 0 {
		longest = 0
	}
	v := longest * VisibilityFactor
	if v/VisibilityFactor != longest || v > maxVisibilityTimeout {
		v = maxVisibilityTimeout
	}
	if r := v % time.Second; r != 0 {
		v += time.Second - r
	}
	return max(v, minVisibilityTimeout), nil
}

// RedrivePolicy is an SQS queue's RedrivePolicy attribute.
type RedrivePolicy struct {
	// DeadLetterTargetARN is the dead-letter queue's ARN.
	DeadLetterTargetARN string `json:"deadLetterTargetArn"`
	// MaxReceiveCount is how many receives a message gets before SQS
	// moves it to the dead-letter queue.
	MaxReceiveCount int `json:"maxReceiveCount"`
}

// String returns the attribute's value: a JSON object with maxReceiveCount
// as a string, as SQS writes it.
func (p RedrivePolicy) String() string {
	b, _ := json.Marshal(map[string]string{
		"deadLetterTargetArn": p.DeadLetterTargetARN,
		"maxReceiveCount":     strconv.Itoa(p.MaxReceiveCount),
	})
	return string(b)
}

// ParseRedrivePolicy parses a RedrivePolicy attribute (maxReceiveCount as
// a number or a string).
func ParseRedrivePolicy(s string) (RedrivePolicy, error) {
	var raw struct {
		ARN   string          `json:"deadLetterTargetArn"`
		Count json.RawMessage `json:"maxReceiveCount"`
	}
	if err := json.Unmarshal([]byte(s), &raw); err != nil {
		return RedrivePolicy{}, fmt.Errorf("sqs: RedrivePolicy %q: %w", s, err)
	}
	n, err := strconv.Atoi(strings.Trim(string(raw.Count), `"`))
	if err != nil || raw.ARN == "" {
		return RedrivePolicy{}, fmt.Errorf("sqs: RedrivePolicy %q: needs deadLetterTargetArn and a numeric maxReceiveCount", s)
	}
	return RedrivePolicy{DeadLetterTargetARN: raw.ARN, MaxReceiveCount: n}, nil
}

// RedriveConfig describes the dead-letter settings a source queue should
// have.
type RedriveConfig struct {
	// SourceQueue is the source queue's name, URL or ARN; its ".fifo"
	// suffix says whether it is FIFO.
	SourceQueue string
	// DeadLetterTargetARN is the dead-letter queue's ARN. Required.
	DeadLetterTargetARN string
	// MaxReceiveCount is the redrive policy's maxReceiveCount. Default 4
	// (the seed's advice). Outside 1–1000 it is refused with a
	// *[MaxReceiveCountError]; outside the seed's 3–5 a warning is logged.
	MaxReceiveCount int
	// LongestOperation is the longest spatial operation a message may need
	// (see [VisibilityTimeoutFor]). Default 0: the visibility timeout is
	// 30s.
	LongestOperation time.Duration
	// Logger receives the warnings. Nil discards.
	Logger *slog.Logger
}

// QueueSettings are the source queue attributes a [RedriveConfig] calls
// for.
type QueueSettings struct {
	// RedrivePolicy is the queue's RedrivePolicy.
	RedrivePolicy RedrivePolicy
	// VisibilityTimeout is the queue's VisibilityTimeout.
	VisibilityTimeout time.Duration
	// Warnings are the advice the check logged, if any.
	Warnings []string
}

// Settings checks the configuration and returns the queue attributes it
// calls for. It refuses a FIFO source with a standard dead-letter queue (or
// a standard source with a FIFO one) with a *[FIFOMismatchError], as SQS
// does.
func (c RedriveConfig) Settings() (QueueSettings, error) {
	log := c.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if c.DeadLetterTargetARN == "" {
		return QueueSettings{}, fmt.Errorf("%w: DeadLetterTargetARN is required", ErrInvalidRedrive)
	}
	if c.SourceQueue != "" && isFIFO(c.SourceQueue) != isFIFO(c.DeadLetterTargetARN) {
		return QueueSettings{}, &FIFOMismatchError{Source: c.SourceQueue, DeadLetter: c.DeadLetterTargetARN, SourceFIFO: isFIFO(c.SourceQueue)}
	}
	n := c.MaxReceiveCount
	if n == 0 {
		n = defaultMaxReceiveCount
	}
	if n < minMaxReceiveCount || n > maxMaxReceiveCount {
		return QueueSettings{}, &MaxReceiveCountError{Value: n}
	}
	vt, err := VisibilityTimeoutFor(c.LongestOperation)
	if err != nil {
		return QueueSettings{}, err
	}
	s := QueueSettings{RedrivePolicy: RedrivePolicy{DeadLetterTargetARN: c.DeadLetterTargetARN, MaxReceiveCount: n}, VisibilityTimeout: vt}
	switch {
	case n < recommendedMinReceiveCount:
		s.Warnings = append(s.Warnings, fmt.Sprintf("maxReceiveCount %d is below the recommended %d..%d: a transient failure (a rate-limited tile server, a network blip) may be dead-lettered before it recovers",
			n, recommendedMinReceiveCount, recommendedMaxReceiveCount))
	case n > recommendedMaxReceiveCount:
		s.Warnings = append(s.Warnings, fmt.Sprintf("maxReceiveCount %d is above the recommended %d..%d: broken geometries are retried in vain, burning compute",
			n, recommendedMinReceiveCount, recommendedMaxReceiveCount))
	}
	if VisibilityFactor*c.LongestOperation > maxVisibilityTimeout {
		s.Warnings = append(s.Warnings, fmt.Sprintf("a %v operation needs more than 12h at %d×; the visibility timeout is capped at 12h", c.LongestOperation, VisibilityFactor))
	}
	for _, w := range s.Warnings {
		log.Warn("geodlq: sqs: redrive settings: "+w, slog.String("source_queue", c.SourceQueue), slog.Int("max_receive_count", n))
	}
	return s, nil
}

// Attributes returns the settings as queue attributes, for
// SetQueueAttributes or CreateQueue: RedrivePolicy and VisibilityTimeout
// (seconds).
func (s QueueSettings) Attributes() map[string]string {
	return map[string]string{
		string(types.QueueAttributeNameRedrivePolicy):     s.RedrivePolicy.String(),
		string(types.QueueAttributeNameVisibilityTimeout): strconv.Itoa(int(s.VisibilityTimeout / time.Second)),
	}
}

// Apply sets the attributes on the queue at queueURL (SetQueueAttributes).
func (s QueueSettings) Apply(ctx context.Context, client interface {
	SetQueueAttributes(context.Context, *awssqs.SetQueueAttributesInput, ...func(*awssqs.Options)) (*awssqs.SetQueueAttributesOutput, error)
}, queueURL string) error {
	if _, err := client.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: aws.String(queueURL), Attributes: s.Attributes()}); err != nil {
		return fmt.Errorf("sqs: set redrive settings on %s: %w", queueURL, err)
	}
	return nil
}

// Check reads the queue's RedrivePolicy and VisibilityTimeout
// (GetQueueAttributes) and reports, joined, every way they differ from s.
func (s QueueSettings) Check(ctx context.Context, client API, queueURL string) error {
	out, err := client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(queueURL),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameRedrivePolicy, types.QueueAttributeNameVisibilityTimeout}})
	if err != nil {
		return fmt.Errorf("sqs: reading attributes of %s: %w", queueURL, err)
	}
	var errs []error
	if raw := out.Attributes[string(types.QueueAttributeNameRedrivePolicy)]; raw == "" {
		errs = append(errs, fmt.Errorf("%s has no RedrivePolicy: failed messages are retried until MessageRetentionPeriod deletes them", queueURL))
	} else if got, err := ParseRedrivePolicy(raw); err != nil {
		errs = append(errs, err)
	} else if got != s.RedrivePolicy {
		errs = append(errs, fmt.Errorf("%s has RedrivePolicy %s, want %s", queueURL, got, s.RedrivePolicy))
	}
	if v := out.Attributes[string(types.QueueAttributeNameVisibilityTimeout)]; v != strconv.Itoa(int(s.VisibilityTimeout/time.Second)) {
		errs = append(errs, fmt.Errorf("%s has VisibilityTimeout %ss, want %d", queueURL, v, int(s.VisibilityTimeout/time.Second)))
	}
	return errors.Join(errs...)
}

// CLI returns the aws CLI command that applies the settings, as in the
// seed.
func (s QueueSettings) CLI(queueURL string) string {
	b, _ := json.MarshalIndent(s.Attributes(), "  ", "  ")
	return "aws sqs set-queue-attributes \\\n  --queue-url " + queueURL + " \\\n  --attributes '" + string(b) + "'"
}
