package servicebus

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
)

// Queue setting bounds: Service Bus's least MaxDeliveryCount (1); the
// seed's advice for vector workloads (3 to 5, default 4; Service Bus's own
// default is 10); a LockDuration between 5s and 5min; and the factor of
// the longest expected spatial operation that gives the LockDuration (6).
const (
	minMaxDeliveryCount                                      = 1
	recommendedMinDeliveryCount, recommendedMaxDeliveryCount = 3, 5
	defaultMaxDeliveryCount                                  = 4
	minLockDuration, maxLockDuration                         = 5 * time.Second, 5 * time.Minute
	lockFactor                                               = 6
)

// ErrInvalidSettings is wrapped by [*MaxDeliveryCountError].
var ErrInvalidSettings = errors.New("servicebus: invalid queue settings")

// MaxDeliveryCountError reports a MaxDeliveryCount below 1.
type MaxDeliveryCountError struct{ Value int }

func (e *MaxDeliveryCountError) Error() string {
	return fmt.Sprintf("servicebus: MaxDeliveryCount %d is below Service Bus's minimum %d (the seed recommends %d..%d)",
		e.Value, minMaxDeliveryCount, recommendedMinDeliveryCount, recommendedMaxDeliveryCount)
}

// Unwrap returns [ErrInvalidSettings].
func (e *MaxDeliveryCountError) Unwrap() error { return ErrInvalidSettings }

// QueueConfig describes the dead-letter settings a source queue should
// have.
type QueueConfig struct {
	// MaxDeliveryCount is how many deliveries a message gets before
	// Service Bus moves it to $DeadLetterQueue. Default 4; below 1 it is refused with a
	// *[MaxDeliveryCountError]; outside the seed's 3–5 a warning is logged.
	MaxDeliveryCount int
	// LongestOperation is the longest spatial operation a message may need.
	// LockDuration is 6 × it, between 5 s and 5 min (Service Bus's
	// bounds); past 5 min a consumer's lock renewal (ConsumerOptions.ExtendEvery) must cover the rest
	// (a warning says so). Default 0: 60 s, Service Bus's default.
	LongestOperation time.Duration
	// Logger receives the warnings. Nil discards.
	Logger *slog.Logger
}

// QueueSettings are the queue properties a [QueueConfig] calls for.
type QueueSettings struct {
	// MaxDeliveryCount is the queue's MaxDeliveryCount.
	MaxDeliveryCount int32
	// LockDuration is the queue's LockDuration: the lease of a received
	// message.
	LockDuration time.Duration
	// Warnings are the advice logged, if any.
	Warnings []string
}

// Settings checks the configuration and returns the settings.
func (c QueueConfig) Settings() (QueueSettings, error) {
	log := c.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	n := c.MaxDeliveryCount
	if n == 0 {
		n = defaultMaxDeliveryCount
	}
	if n < minMaxDeliveryCount || n > 1<<31-1 {
		return QueueSettings{}, &MaxDeliveryCountError{Value: n}
	}
	s := QueueSettings{MaxDeliveryCount: int32(n), LockDuration: time.Minute}
	switch {
	case n < recommendedMinDeliveryCount:
		s.Warnings = append(s.Warnings, fmt.Sprintf("MaxDeliveryCount %d is below the recommended %d..%d: transient failures may be dead-lettered before they recover", n, recommendedMinDeliveryCount, recommendedMaxDeliveryCount))
	case n > recommendedMaxDeliveryCount:
		s.Warnings = append(s.Warnings, fmt.Sprintf("MaxDeliveryCount %d is above the recommended %d..%d: broken geometries are retried in vain", n, recommendedMinDeliveryCount, recommendedMaxDeliveryCount))
	}
	if c.LongestOperation > 0 {
		l := c.LongestOperation * lockFactor
		if r := l % time.Second; r != 0 {
			l += time.Second - r
		}
		if l/lockFactor < c.LongestOperation || l > maxLockDuration {
			l = maxLockDuration
			s.Warnings = append(s.Warnings, fmt.Sprintf("a %v operation needs more than Service Bus's 5 min LockDuration; the consumer's lock renewal must cover it", c.LongestOperation))
		}
		s.LockDuration = max(l, minLockDuration)
	}
	for _, w := range s.Warnings {
		log.Warn("geodlq: servicebus: queue settings: "+w, slog.Int("max_delivery_count", n))
	}
	return s, nil
}

// ISO8601 formats d as Service Bus writes durations: "PT1M12S".
func ISO8601(d time.Duration) string {
	secs := int64(d.Round(time.Second) / time.Second)
	out := "PT"
	if h := secs / 3600; h > 0 {
		out += strconv.FormatInt(h, 10) + "H"
	}
	if m := secs % 3600 / 60; m > 0 {
		out += strconv.FormatInt(m, 10) + "M"
	}
	if s := secs % 60; s > 0 || out == "PT" {
		out += strconv.FormatInt(s, 10) + "S"
	}
	return out
}

// Properties returns the settings as admin.QueueProperties for
// admin.Client.CreateQueue or UpdateQueue: MaxDeliveryCount, LockDuration,
// and DeadLetteringOnMessageExpiration (so expired messages are kept too).
func (s QueueSettings) Properties() admin.QueueProperties {
	n, lock, expire := s.MaxDeliveryCount, ISO8601(s.LockDuration), true
	return admin.QueueProperties{MaxDeliveryCount: &n, LockDuration: &lock, DeadLetteringOnMessageExpiration: &expire}
}

// CLI returns the Azure CLI command that applies the settings.
func (s QueueSettings) CLI(resourceGroup, namespace, queue string) string {
	return fmt.Sprintf("az servicebus queue update --resource-group %s --namespace-name %s --name %s \\\n  --max-delivery-count %d --lock-duration %s --enable-dead-lettering-on-message-expiration true",
		resourceGroup, namespace, queue, s.MaxDeliveryCount, ISO8601(s.LockDuration))
}
