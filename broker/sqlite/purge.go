package sqlite

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/envelope"
)

// PurgeOptions selects the records [Store.Purge] deletes.
type PurgeOptions struct {
	// Filter selects records as for Fetch and List; a non-zero filter
	// matches envelopes only. Filter.Until purges by age (dead_lettered_at
	// before it). The zero filter matches every record.
	Filter broker.Filter
	// Pending deletes records that were never replayed as well. Default
	// false: only replayed (acknowledged) records are deleted.
	Pending bool
	// DryRun reports what would be deleted and deletes nothing.
	DryRun bool
}

// PurgeResult reports what [Store.Purge] deleted (or, in a dry run, would
// delete).
type PurgeResult struct {
	// IDs are the deleted records' ids, in id order.
	IDs []string
	// BlobURIs lists, sorted and without duplicates, every offload URI the
	// deleted envelopes referenced (offloaded geometries and whole
	// payloads).
	BlobURIs []string
	// Orphaned lists the BlobURIs that no remaining record of the store
	// references once the purge is done: the blobs that may be deleted.
	Orphaned []string
}

// Purge deletes the records of destination ("" for every destination)
// that opts selects, never a record under a live lease (a replayer holds
// it), and reports which offloaded blobs the deleted envelopes referenced
// and which of those no remaining record references.
//
// Selection, deletion and the reference check run in one write
// transaction, so no record is published into this store between them:
// Orphaned is exact for this store. Blobs themselves are not touched —
// the store does not know the blob store — and a blob store shared with
// other dead-letter stores needs their references checked too. A writer
// that deduplicates onto an orphaned blob (its offloader found the blob
// present) after the purge commits, and before the caller deletes the
// blob, would reference a deleted blob; purge blobs when no producer
// writes, or verify afterwards.
func (s *Store) Purge(ctx context.Context, destination string, opts PurgeOptions) (res PurgeResult, err error) {
	if err := ctx.Err(); err != nil {
		return res, err
	}
	cond, args := where(opts.Filter)
	sel := `(lease_until IS NULL OR lease_until <= ?)`
	all := []any{s.now().UnixNano()}
	if destination != "" {
		sel += ` AND destination = ?`
		all = append(all, destination)
	}
	if !opts.Pending {
		sel += ` AND acked_at IS NOT NULL`
	}
	sel += cond
	all = append(all, args...)
	q := ` FROM dlq_records WHERE ` + sel

	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return res, fmt.Errorf("sqlite: purge: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback()
		}
	}()
	rows, err := tx.QueryContext(ctx, `SELECT id, body, is_envelope`+q+` ORDER BY id`, all...)
	if err != nil {
		return res, fmt.Errorf("sqlite: purge: %w", err)
	}
	uris := map[string]bool{}
	for rows.Next() {
		var (
			id    int64
			body  []byte
			isEnv bool
		)
		if err := rows.Scan(&id, &body, &isEnv); err != nil {
			rows.Close()
			return res, fmt.Errorf("sqlite: purge: %w", err)
		}
		res.IDs = append(res.IDs, strconv.FormatInt(id, 10))
		if !isEnv {
			continue
		}
		if env, err := envelope.Decode(body); err == nil {
			for _, u := range []string{env.Geometry.OffloadURI, env.RawPayloadOffloadURI} {
				if u != "" {
					uris[u] = true
				}
			}
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return res, fmt.Errorf("sqlite: purge: %w", err)
	}
	if len(res.IDs) == 0 {
		return res, nil
	}
	if !opts.DryRun {
		out, err := tx.ExecContext(ctx, `DELETE`+q, all...)
		if err != nil {
			return res, fmt.Errorf("sqlite: purge: %w", err)
		}
		if n, err := out.RowsAffected(); err != nil || n != int64(len(res.IDs)) {
			return res, fmt.Errorf("sqlite: purge: deleted %d records, selected %d (%v)", n, len(res.IDs), err)
		}
	}
	for u := range uris {
		res.BlobURIs = append(res.BlobURIs, u)
	}
	slices.Sort(res.BlobURIs)
	// In a dry run the rows are still there: look only at the others.
	notPurged := ""
	if opts.DryRun {
		notPurged = ` AND NOT COALESCE((` + sel + `), 0)`
	}
	for _, u := range res.BlobURIs {
		var used bool
		// The URI is plain ASCII that the envelope encoder writes
		// unescaped, so a byte search of the bodies finds every reference
		// (geometry.offload_uri, raw_payload_offload_uri, and the $ref in
		// raw_payload), in any destination, replayed records included.
		qa := []any{[]byte(u)}
		if opts.DryRun {
			qa = append(qa, all...)
		}
		err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM dlq_records WHERE instr(body, ?) > 0`+notPurged+`)`, qa...).Scan(&used)
		if err != nil {
			return res, fmt.Errorf("sqlite: purge: reference check: %w", err)
		}
		if !used {
			res.Orphaned = append(res.Orphaned, u)
		}
	}
	if opts.DryRun {
		return res, nil
	}
	committed = true
	if err := tx.Commit(); err != nil {
		return res, fmt.Errorf("sqlite: purge commit: %w", err)
	}
	return res, nil
}
