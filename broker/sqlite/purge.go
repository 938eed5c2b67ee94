package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/envelope"
)

// Purge implements [broker.Purger]: it deletes the records req selects,
// never one under a live lease (a replayer holds it), and reports which
// offloaded blobs the deleted envelopes referenced and which of those no
// remaining record references.
//
// Selection, deletion and the reference check run in one write
// transaction, so no record is published into this store between them:
// Orphaned is exact for this store. A dry run reads one snapshot and
// writes nothing (it works on a read-only handle too). Blobs themselves
// are not touched — the store does not know the blob store — and a blob
// store shared with other dead-letter stores needs their references
// checked too. A writer that deduplicates onto an orphaned blob (its
// offloader found the blob present) after the purge commits, and before
// the caller deletes the blob, would reference a deleted blob; purge blobs
// when no producer writes, or verify afterwards.
func (d *drv) Purge(ctx context.Context, req broker.PurgeRequest) (broker.PurgeResult, error) {
	if !req.DryRun && d.ro != nil {
		return broker.PurgeResult{}, errReadOnly("purge")
	}
	p := purge{req: req}
	p.sel, p.args = `(lease_until IS NULL OR lease_until <= ?)`, []any{nanos(d.now())}
	if req.Destination != "" {
		p.sel += ` AND destination = ?`
		p.args = append(p.args, req.Destination)
	}
	if !req.IncludePending {
		p.sel += ` AND acked_at IS NOT NULL`
	}
	current := d.current()
	if !current && req.Filter.HasAttrFields() {
		return broker.PurgeResult{}, fmt.Errorf("sqlite: purge: %s is at schema version 0, which cannot select by text or source: %w", d.path, errors.ErrUnsupported)
	}
	p.current = current
	cond, args := where(req.Filter, current)
	p.sel += cond
	p.args = append(p.args, args...)

	var (
		res broker.PurgeResult
		err error
	)
	if req.DryRun {
		// One read transaction: a snapshot of the store.
		res, err = read(ctx, d, func(ctx context.Context, db *sql.DB) (broker.PurgeResult, error) {
			c, err := db.Conn(ctx)
			if err != nil {
				return broker.PurgeResult{}, err
			}
			defer c.Close()
			if _, err := c.ExecContext(ctx, "BEGIN"); err != nil { // deferred: no lock yet
				rollback(c)
				return broker.PurgeResult{}, err
			}
			defer rollback(c)
			return p.run(ctx, c)
		})
	} else {
		// The selection and deletion stay interruptible by ctx (a purge
		// can be long): an interrupted purge is rolled back whole. Only the
		// COMMIT is not, so the outcome reported is the outcome on disk.
		err = d.tx(ctx, func(c *sql.Conn) error {
			res, err = p.run(ctx, c)
			return err
		})
	}
	if err != nil {
		return broker.PurgeResult{}, fmt.Errorf("sqlite: purge: %w", err)
	}
	return res, nil
}

// purge is one [drv.Purge]: the selection, as SQL over dlq_records.
type purge struct {
	req     broker.PurgeRequest
	sel     string
	args    []any
	current bool // the file is at schemaVersion: blob URIs in columns
}

func (p *purge) run(ctx context.Context, c *sql.Conn) (res broker.PurgeResult, err error) {
	from := ` FROM dlq_records WHERE ` + p.sel
	// At schemaVersion the blob URIs are columns; a row without a summary
	// (an older geodlq wrote it) is read from its body.
	cols := `NULL, NULL, body, is_envelope`
	if p.current {
		cols = `offload_uri, raw_offload_uri, CASE WHEN summary IS NULL THEN body END, summary IS NULL AND is_envelope`
	}
	rows, err := c.QueryContext(ctx, `SELECT id, destination, `+cols+from+` ORDER BY id`, p.args...)
	if err != nil {
		return res, err
	}
	uris := map[string]bool{}
	for rows.Next() {
		var (
			id       int64
			dest     string
			geo, raw sql.NullString
			body     []byte
			isEnv    bool
		)
		if err := rows.Scan(&id, &dest, &geo, &raw, &body, &isEnv); err != nil {
			rows.Close()
			return res, err
		}
		rid := strconv.FormatInt(id, 10)
		if p.req.Destination == "" {
			rid = dest + "/" + rid
		}
		res.IDs = append(res.IDs, rid)
		for _, u := range []sql.NullString{geo, raw} {
			if u.Valid && u.String != "" {
				uris[u.String] = true
			}
		}
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
		return res, err
	}
	if len(res.IDs) == 0 {
		return res, nil
	}
	if !p.req.DryRun {
		out, err := c.ExecContext(ctx, `DELETE`+from, p.args...)
		if err != nil {
			return res, err
		}
		if n, err := out.RowsAffected(); err != nil || n != int64(len(res.IDs)) {
			return res, fmt.Errorf("deleted %d records, selected %d (%v)", n, len(res.IDs), err)
		}
	}
	for u := range uris {
		res.BlobURIs = append(res.BlobURIs, u)
	}
	slices.Sort(res.BlobURIs)
	// In a dry run the rows are still there: look only at the others.
	notPurged := ""
	if p.req.DryRun {
		notPurged = ` AND NOT COALESCE((` + p.sel + `), 0)`
	}
	for _, u := range res.BlobURIs {
		var used bool
		// The URI is plain ASCII that the envelope encoder writes
		// unescaped, so a byte search of the bodies finds every reference
		// (geometry.offload_uri, raw_payload_offload_uri, and the $ref in
		// raw_payload), in any destination, replayed records included.
		qa := []any{[]byte(u)}
		q := `SELECT EXISTS (SELECT 1 FROM dlq_records WHERE instr(body, ?) > 0` + notPurged + `)`
		if p.current {
			// The URI columns are indexed; only rows an older geodlq wrote
			// (no summary) need their bodies searched.
			qa = []any{u, u, []byte(u)}
			q = `SELECT EXISTS (SELECT 1 FROM dlq_records WHERE (offload_uri = ? OR raw_offload_uri = ? OR
				(summary IS NULL AND instr(body, ?) > 0))` + notPurged + `)`
		}
		if p.req.DryRun {
			qa = append(qa, p.args...)
		}
		err := c.QueryRowContext(ctx, q, qa...).Scan(&used)
		if err != nil {
			return res, fmt.Errorf("reference check: %w", err)
		}
		if !used {
			res.Orphaned = append(res.Orphaned, u)
		}
	}
	return res, nil
}
