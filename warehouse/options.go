package warehouse

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/geojson"
)

// Errors of this package. Each is wrapped, so test with errors.Is.
var (
	// ErrInvalidOptions is wrapped for options no export can honour.
	ErrInvalidOptions = errors.New("warehouse: invalid options")
	// ErrSelectionChanged is wrapped when [Sync] is asked to append to a
	// dataset with another selection (store, destinations, filter,
	// replayed records, prefix depth, source pointer or payloads) than
	// the one it was built with: its watermark's cursors mean nothing for
	// another selection, and its rows would not be one table. The error
	// names the members of [Selection] that differ, the dataset's value
	// and the sync's. Sync into a new directory instead.
	ErrSelectionChanged = errors.New("warehouse: the dataset was synced with another selection")
	// ErrLocked is wrapped when another [Sync] holds the dataset.
	ErrLocked = errors.New("warehouse: another sync is writing this dataset")
	// ErrCorrupt is wrapped when a dataset's watermark or commit record
	// cannot be read, or a file it lists is missing. Nothing is changed.
	ErrCorrupt = errors.New("warehouse: dataset metadata is damaged")
	// ErrNotEnvelope is wrapped by [Writer.Write] for a record whose body
	// is not a dlq.v1 envelope.
	ErrNotEnvelope = errors.New("warehouse: record is not a dlq.v1 envelope")
)

// Lister reads records without leasing or altering them: *broker.Store
// (for example from broker.OpenStore with OpenOptions.ReadOnly) is one.
// List must return records oldest first, and a cursor must keep its
// place: records written after a page was read come after that page's
// cursor. Every geodlq store's List does.
type Lister interface {
	List(ctx context.Context, opts broker.ListOptions) (broker.Page, error)
}

// Options shape the rows and files of an export or sync.
type Options struct {
	// WithPayload adds each event's original payload, restored and
	// verified (see [RowOptions.WithPayload]). Off by default: payloads
	// may hold personal or confidential data.
	WithPayload bool
	// Fetcher reads offloaded geometries and payloads (an
	// *offload.Offloader); see [RowOptions.Fetcher].
	Fetcher envelope.Fetcher
	// PrefixDepth is how many parts of source_uri the source_prefix
	// column keeps; default 1 (scheme and host).
	PrefixDepth int
	// SourcePointer is the JSON pointer (RFC 6901) into the event whose
	// value fills the source_uri (and source_prefix) column, as geodlq
	// list and stats --source-pointer; see [RowOptions.SourcePointer].
	SourcePointer string
	// Limits bound the parse of each geometry for its bounding box.
	Limits geojson.Limits
	// CRS resolves EPSG codes to PROJJSON for the files' geo metadata.
	// Nil: [BuiltinCRS] only (package projcrs resolves the rest with PROJ).
	CRS CRSResolver
	// Compression is the Parquet codec: "snappy" (default; every warehouse
	// reads it), "zstd", "gzip" or "none".
	Compression string
	// Logger receives a line per run and per file. Nil discards.
	Logger *slog.Logger
	// Now returns the current time: exported_at, and the settle delay of
	// [Sync]. Default time.Now.
	Now func() time.Time
}

func (o Options) rowOptions() RowOptions {
	return RowOptions{WithPayload: o.WithPayload, Fetcher: o.Fetcher, PrefixDepth: o.PrefixDepth, SourcePointer: o.SourcePointer,
		Limits: o.Limits, CRS: o.CRS}.withDefaults()
}

func (o *Options) fill() error {
	if o.PrefixDepth < 0 {
		return fmt.Errorf("PrefixDepth %d: %w", o.PrefixDepth, ErrInvalidOptions)
	}
	if o.PrefixDepth == 0 {
		o.PrefixDepth = 1
	}
	if o.SourcePointer == broker.DefaultSourcePointer {
		o.SourcePointer = ""
	}
	if err := broker.ValidSourcePointer(o.SourcePointer); err != nil {
		return fmt.Errorf("SourcePointer: %w: %w", ErrInvalidOptions, err)
	}
	if _, err := codec(o.Compression); err != nil {
		return err
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return nil
}

// envelopeOf returns the entry's envelope, decoding its body with
// envelope.Decode when the store did not: the one-record path's, and the
// reference of [fastEnvelopeOf].
func envelopeOf(e broker.Entry) (*envelope.Envelope, error) { return decodeEntry(e, envelope.Decode) }

// fastEnvelopeOf is envelopeOf through envelope.DecodeFast, which gives
// the same envelope or the same error (FuzzDecodeFast) in one pass over
// the body: [Sync] decodes every record of a store with it.
func fastEnvelopeOf(e broker.Entry) (*envelope.Envelope, error) {
	return decodeEntry(e, envelope.DecodeFast)
}

func decodeEntry(e broker.Entry, decode func([]byte) (*envelope.Envelope, error)) (*envelope.Envelope, error) {
	if e.Record == nil || e.Record.Message == nil {
		return nil, fmt.Errorf("empty record: %w", ErrNotEnvelope)
	}
	if e.Record.Envelope != nil {
		return e.Record.Envelope, nil
	}
	if e.Record.Message.Envelope != nil {
		return e.Record.Message.Envelope, nil
	}
	env, err := decode(e.Record.Message.Body)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotEnvelope, err)
	}
	return env, nil
}

func isNotEnvelope(err error) bool { return errors.Is(err, ErrNotEnvelope) }
