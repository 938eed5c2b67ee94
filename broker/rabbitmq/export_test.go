package rabbitmq

import (
	"github.com/geodlq/geodlq/broker"
)

// Internals the external tests check.
type Death = death

var (
	ParseXDeath     = parseXDeath
	DeliveryAttempt = deliveryAttempt
	ParseURL        = parseURL
)

const (
	ReasonRejected      = reasonRejected
	ReasonDeliveryLimit = reasonDeliveryLimit
	ReasonExpired       = reasonExpired
	ReasonMaxLen        = reasonMaxLen
)

// Exchange returns the exchange s publishes to.
func Exchange(s *broker.Store) string { return driverOf(s).exchange }
