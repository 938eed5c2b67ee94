package mysql

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/mysql/internal/schema"
	"github.com/geodlq/geodlq/broker/txretry"
	"github.com/geodlq/geodlq/classify"
)

// compactEvery is how many rows a handle writes, acknowledges or purges
// between two foldings of the count log into the counts: the log a count
// reads stays a few thousand rows long.
const compactEvery = 4096

// foldBatch is the most log rows one folding transaction takes.
const foldBatch = 4096

// defaultPointer reports whether pointer is the default source pointer,
// whose value the source column (and so the counts) holds.
func defaultPointer(pointer string) bool {
	return pointer == "" || pointer == broker.DefaultSourcePointer
}

// countable reports whether the counts can answer for f: its fields are
// the counts' own (class, stage, reason kind, EPSG, the default source).
func countable(f broker.Filter) bool {
	g := f
	g.Classes, g.Stages, g.ReasonKinds, g.EPSG = nil, nil, nil, nil
	if defaultPointer(f.SourcePointer) {
		g.Sources, g.SourcePrefix, g.SourcePointer = nil, "", ""
	}
	return g.IsZero()
}

// countCols are the fields the counts are kept by.
const countCols = `destination, failure_class, failed_stage, epsg, reason_kind, source, is_envelope, replayed`

// countsFrom is the counts with the changes not yet folded in: sum n over
// it by the fields. One statement reads both tables in one snapshot, and a
// folding moves rows from the log to the counts in one transaction, so a
// count sees each change once.
const countsFrom = `(SELECT ` + countCols + `, n FROM {c} UNION ALL SELECT ` + countCols + `, n FROM {l}) AS c`

// wrote notes that n rows were written, acknowledged or deleted, and folds
// the count log into the counts once compactEvery of them have been since
// the last time (best effort: an error is logged, and a later write tries
// again).
func (d *driver) wrote(ctx context.Context, n int) {
	if n <= 0 {
		return
	}
	after := d.sinceCompact.Add(int64(n))
	if after < compactEvery || !d.sinceCompact.CompareAndSwap(after, 0) {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := d.compact(ctx); err != nil {
		slog.WarnContext(ctx, "geodlq: folding the count log into the counts", slog.String("table", d.name), slog.Any("error", err))
	}
}

// compact folds the count log into the counts, foldBatch rows per
// transaction, until the log holds fewer than that many committed rows.
func (d *driver) compact(ctx context.Context) error {
	for {
		var n int
		err := txretry.Do(ctx, schema.Kind, func(ctx context.Context, _ txretry.Attempt) error {
			var err error
			n, err = d.fold(ctx)
			return err
		}, nil)
		if err != nil {
			return fmt.Errorf("mysql: counts: %w", err)
		}
		if n < foldBatch {
			return nil
		}
	}
}

// countKey is one row of the counts.
type countKey struct {
	dest, class, stage string
	epsg               int64
	kind, source       string
	envelope, replayed bool
}

// fold moves up to foldBatch rows of the log into the counts in one READ
// COMMITTED transaction, and returns how many it moved. The rows are taken
// with FOR UPDATE SKIP LOCKED: committed rows, locked until the end, and
// none of a writer still in its transaction (its rows are folded by a
// later fold, once committed; a rolled-back writer's never exist). Their
// sums are added to the counts and exactly those rows, by seq, deleted:
// a concurrent fold takes other rows, and a reader's snapshot sees every
// change either in the log or in the counts, never both, never neither.
func (d *driver) fold(ctx context.Context) (int, error) {
	tx, err := d.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	rows, err := tx.QueryContext(ctx, d.render(`SELECT seq, `+countCols+`, n FROM {l} ORDER BY seq LIMIT ? FOR UPDATE SKIP LOCKED`), foldBatch)
	if err != nil {
		return 0, err
	}
	var seqs []any
	sums := map[countKey]int64{}
	for rows.Next() {
		var (
			seq, n                        int64
			dest, class, stage, kind, src []byte
			k                             countKey
		)
		if err := rows.Scan(&seq, &dest, &class, &stage, &k.epsg, &kind, &src, &k.envelope, &k.replayed, &n); err != nil {
			rows.Close()
			return 0, err
		}
		k.dest, k.class, k.stage, k.kind, k.source = string(dest), string(class), string(stage), string(kind), string(src)
		seqs = append(seqs, seq)
		sums[k] += n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if len(seqs) == 0 {
		return 0, nil
	}
	// In key order: two folds lock the rows of the counts they share in
	// the same order.
	keys := make([]countKey, 0, len(sums))
	for k, n := range sums {
		if n != 0 {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b countKey) int {
		return cmp.Or(strings.Compare(a.dest, b.dest), strings.Compare(a.class, b.class), strings.Compare(a.stage, b.stage),
			cmp.Compare(a.epsg, b.epsg), strings.Compare(a.kind, b.kind), strings.Compare(a.source, b.source),
			compareBool(a.envelope, b.envelope), compareBool(a.replayed, b.replayed))
	})
	for chunk := range slices.Chunk(keys, 500) {
		args := make([]any, 0, 9*len(chunk))
		for _, k := range chunk {
			args = append(args, []byte(k.dest), []byte(k.class), []byte(k.stage), k.epsg, []byte(k.kind), []byte(k.source), k.envelope, k.replayed, sums[k])
		}
		q := `INSERT INTO {c} (` + countCols + `, n) VALUES ` +
			strings.TrimSuffix(strings.Repeat(`(?, ?, ?, ?, ?, ?, ?, ?, ?), `, len(chunk)), ", ") +
			` ON DUPLICATE KEY UPDATE n = n + VALUES(n)`
		if _, err := tx.ExecContext(ctx, d.render(q), args...); err != nil {
			return 0, err
		}
	}
	for chunk := range slices.Chunk(seqs, 1000) {
		if _, err := tx.ExecContext(ctx, d.render(`DELETE FROM {l} WHERE seq IN (`+placeholders(len(chunk))+`)`), chunk...); err != nil {
			return 0, err
		}
	}
	if _, err := tx.ExecContext(ctx, d.render(`DELETE FROM {c} WHERE n = 0`)); err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	return len(seqs), nil
}

// total is Page.Total from the counts, for a countable filter.
func (d *driver) total(ctx context.Context, opts broker.ListOptions) (int, error) {
	var c cond
	if opts.Destination != "" {
		c.add("destination = ?", []byte(opts.Destination))
	}
	if !opts.IncludeReplayed {
		c.add("NOT replayed")
	}
	w := d.where(opts.Filter)
	c.sql += w.sql
	c.args = append(c.args, w.args...)
	var n int64
	if err := d.db.QueryRowContext(ctx, `SELECT COALESCE(SUM(n), 0) FROM `+d.render(countsFrom)+` WHERE TRUE`+c.sql, c.args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("mysql: list: counting: %w", err)
	}
	return int(n), nil
}

// statsFromCounts is Stats from the counts (a few thousand rows rather
// than every record): open and replayed records by their fields, with the
// records under a live lease (found by the leased index) moved from
// pending to leased, both read in one REPEATABLE READ snapshot.
func (d *driver) statsFromCounts(ctx context.Context, opts broker.StatsOptions) ([]broker.Count, error) {
	var c cond
	if opts.Destination != "" {
		c.add("destination = ?", []byte(opts.Destination))
	}
	w := d.where(opts.Filter)
	c.sql += w.sql
	c.args = append(c.args, w.args...)
	src, rowSrc := "''", "''"
	if opts.BySource {
		src, rowSrc = "IF(is_envelope, source, '')", "IF(is_envelope, COALESCE(source, ''), '')"
	}
	q := `SELECT destination, failure_class, failed_stage, epsg, reason_kind, ` + src + `,
		COALESCE(SUM(IF(replayed, 0, n)), 0), COALESCE(SUM(IF(replayed, n, 0)), 0)
		FROM ` + d.render(countsFrom) + ` WHERE TRUE` + c.sql + ` GROUP BY 1, 2, 3, 4, 5, 6 ORDER BY 1, 2, 3, 4, 5, 6`
	lq := `SELECT destination, COALESCE(failure_class, ''), COALESCE(failed_stage, ''), COALESCE(epsg, 0), COALESCE(reason_kind, ''), ` + rowSrc + `, COUNT(*)
		FROM ` + d.table + ` FORCE INDEX (leased) WHERE lease_until > UTC_TIMESTAMP(6) AND acked_at IS NULL` + c.sql + ` GROUP BY 1, 2, 3, 4, 5, 6`
	// count is a row of either query: the fields as bytes, then n.
	count := func(dest, class, stage, kind, source []byte, epsg int64) broker.Count {
		return broker.Count{Destination: string(dest), Class: classify.Class(class), Stage: classify.Stage(stage),
			EPSG: int(epsg), ReasonKind: classify.ReasonKind(kind), Source: string(source)}
	}
	var out, leased []broker.Count
	err := d.tx(ctx, sql.LevelRepeatableRead, func(tx *sql.Tx) error {
		out, leased = nil, nil
		rows, err := tx.QueryContext(ctx, q, c.args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				dest, class, stage, kind, source []byte
				epsg, open, replayed             int64
			)
			if err := rows.Scan(&dest, &class, &stage, &epsg, &kind, &source, &open, &replayed); err != nil {
				return err
			}
			if open == 0 && replayed == 0 {
				continue
			}
			cnt := count(dest, class, stage, kind, source, epsg)
			cnt.Pending, cnt.Replayed = int(open), int(replayed)
			out = append(out, cnt)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows.Close()
		lrows, err := tx.QueryContext(ctx, lq, c.args...)
		if err != nil {
			return err
		}
		defer lrows.Close()
		for lrows.Next() {
			var (
				dest, class, stage, kind, source []byte
				epsg, n                          int64
			)
			if err := lrows.Scan(&dest, &class, &stage, &epsg, &kind, &source, &n); err != nil {
				return err
			}
			cnt := count(dest, class, stage, kind, source, epsg)
			cnt.Pending = int(n)
			leased = append(leased, cnt)
		}
		return lrows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("mysql: stats: %w", err)
	}
	broker.MoveLeased(out, leased)
	if opts.BySource && opts.SourceDepth > 0 {
		out = broker.MergeCounts(out, func(c *broker.Count) { c.Source = broker.SourceGroup(c.Source, opts.SourceDepth) })
	}
	return out, nil
}

// compareBool orders false before true.
func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}
