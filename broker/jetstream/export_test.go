package jetstream

import (
	"time"

	"github.com/geodlq/geodlq/broker"
)

// Internals the external tests check.
var (
	SubjectToken       = subjectToken
	DestinationOfToken = destinationOfToken
	MsgID              = msgID
	ParseURL           = parseURL
)

const (
	HeaderMsgID         = headerMsgID
	DefaultHeaderBudget = defaultHeaderBudget
)

func driverOf(s *broker.Store) *driver { return s.Driver().(*driver) }

// Subject returns the subject s stores destination under.
func Subject(s *broker.Store, destination string) string { return driverOf(s).subject(destination) }

// ConsumerName returns the durable consumer s reads destination through.
func ConsumerName(s *broker.Store, destination string) string {
	return driverOf(s).consumerName(destination)
}

// StreamName returns the name of s's stream.
func StreamName(s *broker.Store) string { return driverOf(s).streamName }

// Lease returns the lease s enforces.
func Lease(s *broker.Store) time.Duration { return driverOf(s).lease }
