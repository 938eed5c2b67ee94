package postgis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/txretry"
)

// Purge implements [broker.Purger]. A purge is one transaction that first
// locks the table in SHARE ROW EXCLUSIVE mode — writers and fetchers wait
// for it, readers do not — so that between the DELETE and the blob
// reference check no envelope can be written and no record leased; a
// record under a live lease is never deleted, and without
// req.IncludePending only replayed records are. A dry run reads the same
// rows in a read-only REPEATABLE READ transaction and deletes nothing.
//
// The blobs a deleted envelope references are its offload_uri column (the
// geometry) and its raw_payload_offload_uri (the whole payload), read from
// the jsonb envelope or, where jsonb could not hold it, from the body; the
// reference check looks them up among the remaining rows, replayed ones
// included, by the indexes of migration 2.
func (d *driver) Purge(ctx context.Context, req broker.PurgeRequest) (res broker.PurgeResult, err error) {
	// A transaction the server rolled back to resolve a conflict (a
	// deadlock with a writer, a serialization failure of the dry run's
	// snapshot) is run again.
	err = txretry.Do(ctx, txretry.KindOf, func(ctx context.Context, _ txretry.Attempt) error {
		res, err = d.purge(ctx, req)
		return err
	}, nil)
	if err != nil {
		return broker.PurgeResult{}, err
	}
	return res, nil
}

// purge is one attempt of [driver.Purge], in one transaction.
func (d *driver) purge(ctx context.Context, req broker.PurgeRequest) (res broker.PurgeResult, err error) {
	a := &sqlArgs{}
	cond := `true`
	if req.Destination != "" {
		cond += ` AND destination = ` + a.add(req.Destination) + `::text`
	}
	if req.IncludePending {
		cond += ` AND (status <> 'leased' OR lease_until <= now())`
	} else {
		cond += ` AND status = 'replayed'`
	}
	current := d.current(ctx)
	if !current && req.Filter.HasAttrFields() {
		return res, fmt.Errorf("postgis: purge: %s is older than schema version %d and cannot select by text or source: %w", d.table, summaryVersion, errors.ErrUnsupported)
	}
	cond += where(req.Filter, a, current)
	const returning = ` id, destination, offload_uri, envelope->>'raw_payload_offload_uri', CASE WHEN is_envelope AND envelope IS NULL THEN body END`

	txo := pgx.TxOptions{}
	if req.DryRun {
		txo = pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}
	}
	tx, err := d.pool.BeginTx(ctx, txo)
	if err != nil {
		return res, fmt.Errorf("postgis: purge: %w", err)
	}
	defer func() {
		if err != nil || req.DryRun {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	q := `SELECT` + returning + ` FROM ` + d.table + ` WHERE ` + cond + ` ORDER BY id`
	if !req.DryRun {
		if _, err := tx.Exec(ctx, `LOCK TABLE `+d.table+` IN SHARE ROW EXCLUSIVE MODE`); err != nil {
			return res, fmt.Errorf("postgis: purge: %w", err)
		}
		q = `DELETE FROM ` + d.table + ` WHERE ` + cond + ` RETURNING` + returning
	}
	rows, err := tx.Query(ctx, q, a.list...)
	if err != nil {
		return res, fmt.Errorf("postgis: purge: %w", err)
	}
	type gone struct {
		id   int64
		dest string
	}
	var deleted []gone
	uris := map[string]bool{}
	for rows.Next() {
		var (
			g        gone
			geom, rp *string
			body     []byte
		)
		if err := rows.Scan(&g.id, &g.dest, &geom, &rp, &body); err != nil {
			rows.Close()
			return res, fmt.Errorf("postgis: purge: %w", err)
		}
		deleted = append(deleted, g)
		for _, u := range referenced(geom, rp, body) {
			uris[u] = true
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return res, fmt.Errorf("postgis: purge: %w", err)
	}
	slices.SortFunc(deleted, func(x, y gone) int { return cmp.Compare(x.id, y.id) })
	ids := make([]int64, len(deleted))
	for i, g := range deleted {
		ids[i] = g.id
		id := strconv.FormatInt(g.id, 10)
		if req.Destination == "" {
			id = g.dest + "/" + id
		}
		res.IDs = append(res.IDs, id)
	}
	for u := range uris {
		res.BlobURIs = append(res.BlobURIs, u)
	}
	slices.Sort(res.BlobURIs)
	if len(res.BlobURIs) > 0 {
		// The deleted rows are gone within the transaction; a dry run
		// leaves its selection out by id.
		except := []int64{}
		if req.DryRun {
			except = ids
		}
		still, err := d.stillReferenced(ctx, tx, res.BlobURIs, except)
		if err != nil {
			return res, err
		}
		for _, u := range res.BlobURIs {
			if !still[u] {
				res.Orphaned = append(res.Orphaned, u)
			}
		}
	}
	if req.DryRun {
		return res, nil
	}
	if err := tx.Commit(ctx); err != nil {
		return res, fmt.Errorf("postgis: purge commit: %w", err)
	}
	d.wrote(ctx, len(ids))
	return res, nil
}

// referenced returns the blob URIs of one row: the geometry's offload_uri
// column and the jsonb envelope's raw_payload_offload_uri, or, for an
// envelope jsonb could not hold (its body is then given), both decoded
// from the body.
func referenced(geom, rawPayload *string, body []byte) []string {
	if body != nil {
		env, err := broker.EnvelopeOf(&broker.Message{Body: body})
		if err != nil {
			return nil
		}
		var us []string
		for _, u := range []string{env.Geometry.OffloadURI, env.RawPayloadOffloadURI} {
			if u != "" {
				us = append(us, u)
			}
		}
		return us
	}
	var us []string
	for _, u := range []*string{geom, rawPayload} {
		if u != nil && *u != "" {
			us = append(us, *u)
		}
	}
	return us
}

// stillReferenced returns which of uris a row other than those of except
// references.
func (d *driver) stillReferenced(ctx context.Context, tx pgx.Tx, uris []string, except []int64) (map[string]bool, error) {
	still := map[string]bool{}
	rows, err := tx.Query(ctx, `SELECT u FROM unnest($1::text[]) AS u
		WHERE EXISTS (SELECT 1 FROM `+d.table+` WHERE offload_uri = u AND id <> ALL($2::bigint[]))
		   OR EXISTS (SELECT 1 FROM `+d.table+` WHERE envelope->>'raw_payload_offload_uri' = u AND id <> ALL($2::bigint[]))`, uris, except)
	if err != nil {
		return nil, fmt.Errorf("postgis: purge: reference check: %w", err)
	}
	for rows.Next() {
		var u string
		if err := rows.Scan(&u); err != nil {
			rows.Close()
			return nil, fmt.Errorf("postgis: purge: reference check: %w", err)
		}
		still[u] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgis: purge: reference check: %w", err)
	}
	// Envelopes jsonb could not hold (a \u0000, invalid UTF-8) are read
	// from their bodies: rare rows, found by a partial index.
	rows, err = tx.Query(ctx, `SELECT body FROM `+d.table+` WHERE is_envelope AND envelope IS NULL AND id <> ALL($1::bigint[])`, except)
	if err != nil {
		return nil, fmt.Errorf("postgis: purge: reference check: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var body []byte
		if err := rows.Scan(&body); err != nil {
			return nil, fmt.Errorf("postgis: purge: reference check: %w", err)
		}
		for _, u := range referenced(nil, nil, body) {
			still[u] = true
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgis: purge: reference check: %w", err)
	}
	return still, nil
}
