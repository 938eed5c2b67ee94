package pubsub

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
)

// Dead-letter policy bounds: Pub/Sub rejects fewer than 5 attempts with
// INVALID_ARGUMENT, and more than 100; the default, 5, is Pub/Sub's and
// the seed's.
const (
	minMaxDeliveryAttempts, maxMaxDeliveryAttempts = 5, 100
	defaultMaxDeliveryAttempts                     = 5
)

// ErrInvalidDeadLetterPolicy is wrapped by [*MaxDeliveryAttemptsError] and
// by the errors [CheckDeadLetterPolicy] reports for a missing policy.
var ErrInvalidDeadLetterPolicy = errors.New("pubsub: invalid dead-letter policy")

// MaxDeliveryAttemptsError reports a maxDeliveryAttempts outside 5–100.
type MaxDeliveryAttemptsError struct{ Value int }

func (e *MaxDeliveryAttemptsError) Error() string {
	return fmt.Sprintf("pubsub: maxDeliveryAttempts %d outside Pub/Sub's %d..%d (the service rejects fewer than %d)",
		e.Value, minMaxDeliveryAttempts, maxMaxDeliveryAttempts, minMaxDeliveryAttempts)
}

// Unwrap returns [ErrInvalidDeadLetterPolicy].
func (e *MaxDeliveryAttemptsError) Unwrap() error { return ErrInvalidDeadLetterPolicy }

// DeadLetterConfig describes the dead-letter policy a source subscription
// should have.
type DeadLetterConfig struct {
	// DeadLetterTopic is the dead-letter topic, an id or
	// "projects/<p>/topics/<id>". Required.
	DeadLetterTopic string
	// MaxDeliveryAttempts is the policy's maxDeliveryAttempts. Default 5;
	// outside 5–100 it is refused with a
	// *[MaxDeliveryAttemptsError].
	MaxDeliveryAttempts int
}

// Policy checks the configuration and returns the policy, with the topic's
// full name in project.
func (c DeadLetterConfig) Policy(project string) (*pubsubpb.DeadLetterPolicy, error) {
	if c.DeadLetterTopic == "" {
		return nil, fmt.Errorf("%w: DeadLetterTopic is required", ErrInvalidDeadLetterPolicy)
	}
	n := c.MaxDeliveryAttempts
	if n == 0 {
		n = defaultMaxDeliveryAttempts
	}
	if n < minMaxDeliveryAttempts || n > maxMaxDeliveryAttempts {
		return nil, &MaxDeliveryAttemptsError{Value: n}
	}
	topic := c.DeadLetterTopic
	if !strings.HasPrefix(topic, "projects/") {
		topic = "projects/" + project + "/topics/" + topic
	}
	return &pubsubpb.DeadLetterPolicy{DeadLetterTopic: topic, MaxDeliveryAttempts: int32(n)}, nil
}

// Gcloud returns the gcloud command that sets the policy on subscription,
// as in the seed.
func (c DeadLetterConfig) Gcloud(project, subscription string) (string, error) {
	p, err := c.Policy(project)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("gcloud pubsub subscriptions update %s \\\n  --dead-letter-topic=%s \\\n  --max-delivery-attempts=%d",
		subscription, p.DeadLetterTopic, p.MaxDeliveryAttempts), nil
}

// Apply sets the policy on subscription (UpdateSubscription), after
// checking that the dead-letter topic has a subscription: it refuses with
// a *[NoSubscriptionError] otherwise, since Pub/Sub would forward messages
// into a topic that keeps none.
func (c DeadLetterConfig) Apply(ctx context.Context, client *pubsub.Client, subscription string) error {
	p, err := c.Policy(client.Project())
	if err != nil {
		return err
	}
	if err := checkTopicRead(ctx, client, p.DeadLetterTopic); err != nil {
		return err
	}
	_, err = client.SubscriptionAdminClient.UpdateSubscription(ctx, &pubsubpb.UpdateSubscriptionRequest{
		Subscription: &pubsubpb.Subscription{Name: fullSub(client, subscription), DeadLetterPolicy: p},
		UpdateMask:   &fieldmaskpb.FieldMask{Paths: []string{"dead_letter_policy"}},
	})
	if err != nil {
		return fmt.Errorf("pubsub: set dead-letter policy on %s: %w", subscription, err)
	}
	return nil
}

func fullSub(client *pubsub.Client, sub string) string {
	if strings.HasPrefix(sub, "projects/") {
		return sub
	}
	return "projects/" + client.Project() + "/subscriptions/" + sub
}

func checkTopicRead(ctx context.Context, client *pubsub.Client, topic string) error {
	if _, err := client.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: topic}); err != nil {
		return fmt.Errorf("pubsub: dead-letter topic %s: %w", topic, err)
	}
	n, err := countSubscriptions(ctx, client, topic)
	if err != nil {
		return fmt.Errorf("pubsub: subscriptions of dead-letter topic %s: %w", topic, err)
	}
	if n == 0 {
		return &NoSubscriptionError{Topic: topic}
	}
	return nil
}

// CheckDeadLetterPolicy reads subscription's dead-letter policy and
// reports, joined, what is wrong with it: no policy, a
// maxDeliveryAttempts outside 5–100 (*[MaxDeliveryAttemptsError]), a
// dead-letter topic that does not exist, or one without a subscription
// (*[NoSubscriptionError]: forwarded messages would be lost). It returns
// the policy it found.
func CheckDeadLetterPolicy(ctx context.Context, client *pubsub.Client, subscription string) (*pubsubpb.DeadLetterPolicy, error) {
	sub, err := client.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: fullSub(client, subscription)})
	if err != nil {
		return nil, fmt.Errorf("pubsub: subscription %s: %w", subscription, err)
	}
	p := sub.GetDeadLetterPolicy()
	if p == nil || p.GetDeadLetterTopic() == "" {
		return nil, fmt.Errorf("%w: subscription %s has no dead-letter policy: a poison message is redelivered until it expires", ErrInvalidDeadLetterPolicy, subscription)
	}
	var errs []error
	if n := int(p.GetMaxDeliveryAttempts()); n != 0 && (n < minMaxDeliveryAttempts || n > maxMaxDeliveryAttempts) {
		errs = append(errs, &MaxDeliveryAttemptsError{Value: n})
	}
	if err := checkTopicRead(ctx, client, p.GetDeadLetterTopic()); err != nil {
		errs = append(errs, err)
	}
	return p, errors.Join(errs...)
}
