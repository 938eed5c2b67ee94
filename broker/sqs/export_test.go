package sqs

import (
	"context"

	"github.com/geodlq/geodlq/broker"
)

// Test hooks.
var (
	GroupID = groupID
	IsFIFO  = isFIFO
)

// Attribute names the tests look for.
const (
	AttrBodyEncoding     = attrBodyEncoding
	AttrHeaders          = attrHeaders
	MaxMessageAttributes = maxMessageAttributes
)

// QueueURL resolves destination to its queue URL as the store s does.
func QueueURL(ctx context.Context, s *broker.Store, destination string) (string, error) {
	return s.Driver().(*driver).queueURL(ctx, destination)
}
