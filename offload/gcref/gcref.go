// Package gcref turns dead-letter envelopes into the live set that
// [offload.Offloader.Sweep] needs: the offload URIs every kept envelope
// refers to.
//
// It is a package of its own because package offload cannot know
// envelopes: package envelope imports offload (the builder offloads), so
// offload importing envelope would be a cycle. gcref imports both, and
// broker for messages.
//
// An envelope refers to at most two blobs: its geometry's offload_uri and
// its raw_payload_offload_uri. Both are content-addressed, so envelopes
// share them; a blob may be deleted only when no kept envelope refers to
// it, which is what Sweep decides from this live set.
//
//	live := gcref.FromMessages(slices.Values(dlq.Messages("spatial.events.poison.dlt")))
//	report, err := off.Sweep(ctx, live, &offload.SweepOptions{MinAge: 48 * time.Hour})
//
// The live set must cover every destination whose envelopes may still be
// replayed (retry and poison), and it must be complete: a message that
// does not decode as an envelope yields an error, and Sweep then deletes
// nothing.
package gcref

import (
	"fmt"
	"iter"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/envelope"
)

// References returns the offload URIs env refers to: geometry.offload_uri
// and raw_payload_offload_uri, those that are set, in that order. A nil
// envelope refers to nothing.
func References(env *envelope.Envelope) []string {
	if env == nil {
		return nil
	}
	var refs []string
	if env.Geometry.OffloadURI != "" {
		refs = append(refs, env.Geometry.OffloadURI)
	}
	if env.RawPayloadOffloadURI != "" {
		refs = append(refs, env.RawPayloadOffloadURI)
	}
	return refs
}

// FromEnvelopes returns a live set yielding the [References] of every
// envelope envs yields. An error from envs is passed on.
func FromEnvelopes(envs iter.Seq2[*envelope.Envelope, error]) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		for env, err := range envs {
			if err != nil {
				yield("", err)
				return
			}
			for _, ref := range References(env) {
				if !yield(ref, nil) {
					return
				}
			}
		}
	}
}

// FromMessages returns a live set yielding the references of the envelope
// each dead-letter message carries in its body. A body that does not
// decode as a dlq.v1 envelope yields an error wrapping the decode error:
// what it refers to cannot be known.
func FromMessages(msgs iter.Seq[*broker.Message]) iter.Seq2[string, error] {
	return FromEnvelopes(func(yield func(*envelope.Envelope, error) bool) {
		for m := range msgs {
			if m == nil {
				continue
			}
			env, err := envelope.Decode(m.Body)
			if err != nil {
				yield(nil, fmt.Errorf("gcref: message is not a dlq.v1 envelope: %w", err))
				return
			}
			if !yield(env, nil) {
				return
			}
		}
	})
}

// FromRecords returns a live set yielding the references of dead-letter
// records, using each record's decoded Envelope when the source set it and
// decoding its message body otherwise. An error from records is passed on.
func FromRecords(records iter.Seq2[*broker.Record, error]) iter.Seq2[string, error] {
	return FromEnvelopes(func(yield func(*envelope.Envelope, error) bool) {
		for r, err := range records {
			if err != nil {
				yield(nil, err)
				return
			}
			if r == nil {
				continue
			}
			env := r.Envelope
			if env == nil {
				if r.Message == nil {
					yield(nil, fmt.Errorf("gcref: record %q of %q has neither envelope nor message", r.ID, r.Destination))
					return
				}
				if env, err = envelope.Decode(r.Message.Body); err != nil {
					yield(nil, fmt.Errorf("gcref: record %q of %q is not a dlq.v1 envelope: %w", r.ID, r.Destination, err))
					return
				}
			}
			if !yield(env, nil) {
				return
			}
		}
	})
}
