package postgis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/txretry"
)

// The batched settlements: one statement for every record of a batch,
// each row fenced by its own lease token in the statement's WHERE, as
// renewSQL and ackSQL fence one. The records come as three arrays
// (ids, destinations, tokens) joined to the table; RETURNING names the
// rows changed, with the token that matched.
const renewBatchSQL = `
UPDATE {t} AS d SET lease_until = now() + $4::bigint * interval '1 microsecond'
FROM unnest($1::bigint[], $2::text[], $3::text[]) AS r(id, destination, token)
WHERE d.id = r.id AND d.destination = r.destination AND d.lease_token = r.token AND d.status = 'leased'
RETURNING d.id, r.destination, r.token, d.status`

const ackBatchSQL = `
UPDATE {t} AS d SET
	status = CASE WHEN d.redead_lettered THEN 'pending' ELSE 'replayed' END,
	replayed_at = CASE WHEN d.redead_lettered THEN NULL ELSE now() END,
	lease_token = NULL, lease_until = NULL, redead_lettered = false
FROM unnest($1::bigint[], $2::text[], $3::text[]) AS r(id, destination, token)
WHERE d.id = r.id AND d.destination = r.destination AND d.lease_token = r.token AND d.status = 'leased'
RETURNING d.id, r.destination, r.token, d.status`

// RenewBatch implements [broker.BatchSettler]: the leases of rs renewed
// to LeaseTTL from now on the database's clock in one statement, each
// only while its token is still its row's.
func (d *driver) RenewBatch(ctx context.Context, rs []*broker.Record) []error {
	expires := time.Now().Add(d.ttl)
	errs, changed := d.settleBatch(ctx, rs, d.renewBatchSQL, false, max(d.ttl.Microseconds(), 1))
	for i, r := range rs {
		if errs[i] == nil && changed[i] != "" {
			r.LeaseExpires = expires
		}
	}
	return errs
}

// AckBatch implements [broker.BatchSettler]: rs marked replayed in one
// statement, each only while its token is still its row's. A record
// dead-lettered again during its lease goes back to pending, and its
// entry wraps [broker.ErrLeaseLost] and [ErrDeadLetteredAgain], as Ack's
// error does.
func (d *driver) AckBatch(ctx context.Context, rs []*broker.Record) []error {
	errs, changed := d.settleBatch(ctx, rs, d.ackBatchSQL, true)
	n := 0
	for i, r := range rs {
		if errs[i] != nil {
			continue
		}
		n++
		if changed[i] != string(broker.StatusReplayed) {
			errs[i] = fmt.Errorf("postgis: record %s/%s: %w: %w", r.Destination, r.ID, broker.ErrLeaseLost, ErrDeadLetteredAgain)
		}
	}
	d.wrote(ctx, n)
	return errs
}

// settleBatch runs the batched statement q over rs and returns an error
// per record and, for those changed, the row's status after. A record
// given twice (the same id, destination and lease) is settled by its
// first entry; with once, the later ones fail as a second Ack would.
func (d *driver) settleBatch(ctx context.Context, rs []*broker.Record, q string, once bool, more ...any) ([]error, []string) {
	errs := make([]error, len(rs))
	changed := make([]string, len(rs))
	type ref struct {
		id          int64
		dest, token string
	}
	at := map[ref][]int{}
	ids := make([]int64, 0, len(rs))
	dests := make([]string, 0, len(rs))
	tokens := make([]string, 0, len(rs))
	for i, r := range rs {
		id, err := strconv.ParseInt(r.ID, 10, 64)
		if err != nil || r.Lease == "" {
			errs[i] = fmt.Errorf("postgis: record %s/%s was not leased from this store: %w", r.Destination, r.ID, broker.ErrLeaseLost)
			continue
		}
		k := ref{id, r.Destination, r.Lease}
		if len(at[k]) == 0 {
			ids, dests, tokens = append(ids, id), append(dests, r.Destination), append(tokens, r.Lease)
		}
		at[k] = append(at[k], i)
	}
	if len(ids) == 0 {
		return errs, changed
	}
	got := map[ref]string{}
	args := append([]any{ids, dests, tokens}, more...)
	err := txretry.Do(ctx, txretry.KindOf, func(ctx context.Context, _ txretry.Attempt) error {
		clear(got)
		rows, err := d.pool.Query(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var k ref
			var st string
			if err := rows.Scan(&k.id, &k.dest, &k.token, &st); err != nil {
				return err
			}
			got[k] = st
		}
		return rows.Err()
	}, nil)
	for k, is := range at {
		for n, i := range is {
			st, ok := got[k]
			switch {
			case err != nil:
				errs[i] = fmt.Errorf("postgis: %d records: %w", len(ids), err)
			case !ok || (once && n > 0):
				errs[i] = fmt.Errorf("postgis: record %s/%s: %w", rs[i].Destination, rs[i].ID, broker.ErrLeaseLost)
			default:
				changed[i] = st
			}
		}
	}
	return errs, changed
}
