package redisstream

import (
	"context"
	"fmt"
	"slices"

	"github.com/geodlq/geodlq/broker"
)

// purgeChunk is how many ids one purge script call checks and deletes.
const purgeChunk = 500

// Purge implements [broker.Purger]: it deletes (XDEL) the selected
// entries and reports the offload URIs they referenced.
//
// Atomicity, honestly: per destination, the final check of each selected
// entry — still there, no live lease, acknowledged unless IncludePending —
// and its deletion run in one Lua script, so no fetcher can lease an entry
// between the check and the XDEL, and a record under a live lease is never
// deleted. The selection by envelope fields runs before, in the client, on
// the entries it reads; an entry written after it is not selected. The
// orphan check reads every destination after the deletions (and the
// entries written to them meanwhile), but it cannot be atomic with
// writers across streams (they may live on different cluster nodes): a
// record published after it may reference a blob it reports as orphaned.
// Orphaned is therefore advisory; offload.Sweep, which enumerates the
// live set itself and quarantines for a grace period first, is the safe
// way to delete blobs.
func (d *driver) Purge(ctx context.Context, req broker.PurgeRequest) (broker.PurgeResult, error) {
	targets, err := d.dests(ctx, req.Destination)
	if err != nil {
		return broker.PurgeResult{}, err
	}
	var res broker.PurgeResult
	deleted := map[pos]bool{}
	for _, dest := range targets {
		cands, err := d.purgeCandidates(ctx, dest, req.Filter)
		if err != nil {
			return res, fmt.Errorf("redisstream: purge %q: %w", dest, err)
		}
		gone, err := d.purgeDelete(ctx, dest, cands, req)
		if err != nil {
			return res, fmt.Errorf("redisstream: purge %q: %w", dest, err)
		}
		for _, c := range cands {
			if !gone[c.id] {
				continue
			}
			deleted[c.p] = true
			id := c.id
			if req.Destination == "" {
				id = dest + "/" + id
			}
			res.IDs = append(res.IDs, id)
			res.BlobURIs = append(res.BlobURIs, c.uris...)
		}
	}
	slices.Sort(res.BlobURIs)
	res.BlobURIs = slices.Compact(res.BlobURIs)
	if len(res.BlobURIs) == 0 {
		return res, nil
	}
	// Which of those blobs does a remaining record still reference?
	still := map[string]bool{}
	all, err := d.dests(ctx, "")
	if err != nil {
		return res, err
	}
	if req.Destination != "" && !slices.Contains(all, req.Destination) {
		all = append(all, req.Destination)
	}
	for _, dest := range all {
		err := d.scanAll(ctx, dest, func(e entry) error {
			if deleted[e.p] {
				return nil
			}
			for _, u := range blobURIs(record(e)) {
				still[u] = true
			}
			return nil
		})
		if err != nil {
			return res, fmt.Errorf("redisstream: purge: checking blob references in %q: %w", dest, err)
		}
	}
	for _, u := range res.BlobURIs {
		if !still[u] {
			res.Orphaned = append(res.Orphaned, u)
		}
	}
	return res, nil
}

type candidate struct {
	p    pos
	id   string
	uris []string
}

// purgeCandidates returns the entries of dest that match f, oldest first.
func (d *driver) purgeCandidates(ctx context.Context, dest string, f broker.Filter) ([]candidate, error) {
	var out []candidate
	add := func(e entry) error {
		if r := record(e); matches(f, r) {
			out = append(out, candidate{p: e.p, id: e.id, uris: blobURIs(r)})
		}
		return nil
	}
	if len(f.IDs) > 0 {
		page, _, _, err := d.listIDs(ctx, dest, broker.ListOptions{Destination: dest, Filter: f, IncludeReplayed: true, Limit: broker.MaxFilterValues}, nil)
		if err != nil {
			return nil, err
		}
		for _, e := range page {
			ms, seq, _ := parseID(e.Record.ID)
			out = append(out, candidate{p: pos{ms, seq, dest}, id: e.Record.ID, uris: blobURIs(e.Record)})
		}
		return out, nil
	}
	return out, d.scanAll(ctx, dest, add)
}

// purgeDelete runs the purge script over cands in chunks and returns the
// ids it deleted (or, in a dry run, would delete).
func (d *driver) purgeDelete(ctx context.Context, dest string, cands []candidate, req broker.PurgeRequest) (map[string]bool, error) {
	gone := map[string]bool{}
	pending, dry := "0", "0"
	if req.IncludePending {
		pending = "1"
	}
	if req.DryRun {
		dry = "1"
	}
	key := d.streamKey(dest)
	for chunk := range slices.Chunk(cands, purgeChunk) {
		if err := ctx.Err(); err != nil {
			return gone, err
		}
		args := []any{d.group, parkConsumer, d.ttl.Milliseconds(), pending, dry}
		for _, c := range chunk {
			args = append(args, c.id)
		}
		ids, err := purgeScript.Run(ctx, d.client, []string{key}, args...).StringSlice()
		if err != nil {
			return gone, err
		}
		for _, id := range ids {
			gone[id] = true
		}
	}
	return gone, nil
}

// scanAll calls fn for every entry of dest, oldest first.
func (d *driver) scanAll(ctx context.Context, dest string, fn func(entry) error) error {
	key := d.streamKey(dest)
	start := "-"
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		batch, err := d.readRange(ctx, key, dest, start, "+", 200, false)
		if err != nil {
			return err
		}
		for _, e := range batch {
			if err := fn(e); err != nil {
				return err
			}
		}
		if len(batch) < 200 {
			return nil
		}
		start = "(" + batch[len(batch)-1].id
	}
}

// blobURIs returns the offload URIs the envelope of r references.
func blobURIs(r *broker.Record) []string {
	env := r.Envelope
	if env == nil {
		return nil
	}
	var us []string
	if env.Geometry.OffloadURI != "" {
		us = append(us, env.Geometry.OffloadURI)
	}
	if env.RawPayloadOffloadURI != "" {
		us = append(us, env.RawPayloadOffloadURI)
	}
	return us
}
