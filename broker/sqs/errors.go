package sqs

import (
	"errors"
	"fmt"
	"strings"

	"github.com/aws/smithy-go"
)

// ErrFIFOMismatch is wrapped by [*FIFOMismatchError].
var ErrFIFOMismatch = errors.New("sqs: FIFO and standard queues mixed")

// FIFOMismatchError reports a FIFO source paired with a standard
// dead-letter queue (or, in a redrive policy, a standard source with a FIFO
// one). SQS itself refuses such a redrive policy; the adapter refuses to
// dead-letter a FIFO source's message into a standard queue, which would
// drop its MessageGroupId and MessageDeduplicationId.
type FIFOMismatchError struct {
	// Source is the source queue (name, URL or ARN).
	Source string
	// DeadLetter is the dead-letter queue (name, URL or ARN).
	DeadLetter string
	// SourceFIFO is true when the source is the FIFO queue.
	SourceFIFO bool
}

func (e *FIFOMismatchError) Error() string {
	if e.SourceFIFO {
		return fmt.Sprintf("sqs: source %q is a FIFO queue but dead-letter queue %q is a standard queue; a FIFO source needs a FIFO dead-letter queue (name ending in .fifo) so MessageGroupId and MessageDeduplicationId are preserved", e.Source, e.DeadLetter)
	}
	return fmt.Sprintf("sqs: source %q is a standard queue but dead-letter queue %q is a FIFO queue; SQS requires a standard queue's dead-letter queue to be standard", e.Source, e.DeadLetter)
}

// Unwrap returns [ErrFIFOMismatch].
func (e *FIFOMismatchError) Unwrap() error { return ErrFIFOMismatch }

// entryError is the failure of one entry of a batch request
// (SendMessageBatch, DeleteMessageBatch, ChangeMessageVisibilityBatch), as
// SQS reported it. It implements smithy.APIError, so code that checks
// ErrorCode treats batched and single requests alike.
type entryError struct {
	// Op is the batch operation.
	Op string
	// Code is SQS's error code, e.g. "ReceiptHandleIsInvalid".
	Code string
	// Message is SQS's message.
	Message string
	// SenderFault is true when SQS blames the request.
	SenderFault bool
}

func (e *entryError) Error() string {
	return fmt.Sprintf("sqs: %s entry failed: %s: %s", e.Op, e.Code, e.Message)
}

// ErrorCode returns the SQS error code.
func (e *entryError) ErrorCode() string { return e.Code }

// ErrorMessage returns the SQS error message.
func (e *entryError) ErrorMessage() string { return e.Message }

// ErrorFault says whose fault the failure is.
func (e *entryError) ErrorFault() smithy.ErrorFault {
	if e.SenderFault {
		return smithy.FaultClient
	}
	return smithy.FaultServer
}

var _ smithy.APIError = (*entryError)(nil)

// isLeaseLost reports whether err is SQS saying a receipt handle is no
// longer valid: ReceiptHandleIsInvalid, MessageNotInflight, or an invalid
// ReceiptHandle parameter ("the receipt handle has expired").
func isLeaseLost(err error) bool {
	var api smithy.APIError
	if !errors.As(err, &api) {
		return false
	}
	switch api.ErrorCode() {
	case "ReceiptHandleIsInvalid", "AWS.SimpleQueueService.ReceiptHandleIsInvalid",
		"MessageNotInflight", "AWS.SimpleQueueService.MessageNotInflight":
		return true
	case "InvalidParameterValue", "InvalidParameterValueException":
		return strings.Contains(strings.ToLower(api.ErrorMessage()), "receipt handle")
	}
	return false
}

// isQueueMissing reports whether err is SQS saying a queue does not exist.
func isQueueMissing(err error) bool {
	var api smithy.APIError
	if !errors.As(err, &api) {
		return false
	}
	switch api.ErrorCode() {
	case "QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue", "NonExistentQueue":
		return true
	}
	return false
}
