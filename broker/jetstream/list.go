package jetstream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/geodlq/geodlq/broker"
)

// listScanLimit bounds how many stream messages one page of List reads
// while its filter matches none of them; the page then ends early, with
// a cursor to go on from.
const listScanLimit = 10 * broker.MaxListLimit

// List implements [broker.Lister] with the stream's message-get API
// (a direct get where the stream allows it): a message at or after a
// sequence on a subject, one request per record. It creates no consumer,
// leases nothing and writes nothing, so it works on a read-only store.
// The cursor is the stream sequence of the page's last record. Every
// record still in the work-queue stream is un-acknowledged; whether it is
// leased is not known without a consumer, so Status is "".
func (d *driver) List(ctx context.Context, opts broker.ListOptions) (broker.Page, error) {
	subject := d.prefix + ".>"
	if opts.Destination != "" {
		subject = d.subject(opts.Destination)
	}
	var after uint64
	if opts.After != "" {
		n, err := strconv.ParseUint(opts.After, 10, 64)
		if err != nil || n == 0 {
			return broker.Page{}, fmt.Errorf("jetstream: list cursor %q is not a stream sequence: %w", opts.After, broker.ErrInvalidArgument)
		}
		after = n
	}
	ctx, cancel := d.withTimeout(ctx)
	defer cancel()
	if opts.Descending {
		return d.listBackward(ctx, subject, after, opts)
	}
	return d.listForward(ctx, subject, after, opts)
}

// next returns the first record of subject at or after seq, or nil at the
// end of the stream.
func (d *driver) next(ctx context.Context, subject string, seq uint64) (*natsjs.RawStreamMsg, error) {
	raw, err := d.stream.GetMsg(ctx, seq, natsjs.WithGetMsgSubject(subject))
	if errors.Is(err, natsjs.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("jetstream: reading %q at sequence %d: %w", subject, seq, err)
	}
	return raw, nil
}

// entry converts a stored message into a listing entry; false for a
// message the store did not write or that the filter does not match.
func (d *driver) entry(raw *natsjs.RawStreamMsg, f broker.Filter) (broker.Entry, bool) {
	dest, ok := d.destinationOf(raw.Subject)
	if !ok {
		return broker.Entry{}, false
	}
	r := &broker.Record{ID: strconv.FormatUint(raw.Sequence, 10), Destination: dest, Message: storedMessage(raw.Data, raw.Header)}
	if !f.IsZero() && !f.MatchRecord(r) {
		return broker.Entry{}, false
	}
	return broker.Entry{Record: r, PublishedAt: raw.Time}, true
}

// listForward reads the records after the cursor, oldest first: up to
// Limit matching ones, and one more to know whether a next page exists.
func (d *driver) listForward(ctx context.Context, subject string, after uint64, opts broker.ListOptions) (broker.Page, error) {
	var p broker.Page
	seq := after + 1
	for scanned := 0; ; scanned++ {
		if scanned == listScanLimit {
			p.Next = strconv.FormatUint(seq-1, 10)
			return p, nil
		}
		raw, err := d.next(ctx, subject, seq)
		if err != nil || raw == nil {
			return p, err
		}
		seq = raw.Sequence + 1
		e, ok := d.entry(raw, opts.Filter)
		if !ok {
			continue
		}
		if len(p.Entries) == opts.Limit {
			p.Next = p.Entries[len(p.Entries)-1].Record.ID
			return p, nil
		}
		p.Entries = append(p.Entries, e)
	}
}

// listBackward reads the records before the cursor, newest first. The
// message-get API reads forward only, so it reads a window of sequences
// ending at the cursor, widening it fourfold until it holds more than
// Limit matching records or starts at the stream's first message.
func (d *driver) listBackward(ctx context.Context, subject string, before uint64, opts broker.ListOptions) (broker.Page, error) {
	info, err := d.stream.Info(ctx)
	if err != nil {
		return broker.Page{}, fmt.Errorf("jetstream: stream %q: %w", d.streamName, err)
	}
	first, hi := info.State.FirstSeq, info.State.LastSeq
	if before > 0 {
		hi = min(hi, before-1)
	}
	if hi == 0 || hi < first {
		return broker.Page{}, nil
	}
	width := uint64(max(4*opts.Limit, 64))
	for {
		lo := first
		if hi-first >= width {
			lo = hi - width + 1
		}
		var got []broker.Entry
		for seq := lo; seq <= hi; {
			raw, err := d.next(ctx, subject, seq)
			if err != nil {
				return broker.Page{}, err
			}
			if raw == nil || raw.Sequence > hi {
				break
			}
			seq = raw.Sequence + 1
			if e, ok := d.entry(raw, opts.Filter); ok {
				got = append(got, e)
			}
		}
		if len(got) > opts.Limit || lo == first {
			slices.Reverse(got)
			var p broker.Page
			if len(got) > opts.Limit {
				got = got[:opts.Limit]
				p.Next = got[len(got)-1].Record.ID
			}
			p.Entries = got
			return p, nil
		}
		width = min(width*4, hi-first+1)
	}
}

// Destinations implements [broker.Lister]: the destinations whose subjects
// hold messages, from the stream's per-subject counts.
func (d *driver) Destinations(ctx context.Context) ([]string, error) {
	ctx, cancel := d.withTimeout(ctx)
	defer cancel()
	info, err := d.stream.Info(ctx, natsjs.WithSubjectFilter(d.prefix+".>"))
	if err != nil {
		return nil, fmt.Errorf("jetstream: stream %q: %w", d.streamName, err)
	}
	var out []string
	for subj, n := range info.State.Subjects {
		if dest, ok := d.destinationOf(subj); ok && n > 0 {
			out = append(out, dest)
		}
	}
	return out, nil
}
