package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/offload"
)

// allDestinations names the destination of a purge without --dest.
const allDestinations = "all destinations"

type purgeOptions struct {
	olderThan    string
	classes      []string
	replayedOnly bool
	yes          bool
	dryRun       bool
	keepBlobs    bool
	grace        time.Duration
	out          *output
}

// purgeReport is what purge writes with --json. Field names are stable.
type purgeReport struct {
	DryRun       bool        `json:"dry_run"`
	Before       string      `json:"before"`
	Records      int         `json:"records"`
	Destinations []purgeDest `json:"destinations"`
	// Unreferenced lists the blobs whose last reference this purge deleted.
	Unreferenced []string `json:"unreferenced_blobs"`
	// Sweep is the blob collection that followed; nil when blobs were
	// left alone, and BlobsKept says why.
	Sweep     *sweepSummary `json:"blob_sweep,omitempty"`
	BlobsKept string        `json:"blobs_kept,omitempty"`
}

type purgeDest struct {
	Destination string   `json:"destination"`
	IDs         []string `json:"ids"`
}

// sweepSummary is offload.SweepReport for people and scripts.
type sweepSummary struct {
	Grace       string   `json:"grace"`
	Listed      int      `json:"listed"`
	Referenced  int      `json:"referenced"`
	Young       int      `json:"young"`
	Quarantined []string `json:"quarantined"`
	Restored    []string `json:"restored"`
	Deleted     []string `json:"deleted"`
	Pending     int      `json:"pending"`
}

func newPurgeCmd(a *app) *cobra.Command {
	var o purgeOptions
	cmd := &cobra.Command{
		Use:   "purge --older-than D",
		Short: "Delete old dead-letter records, and the blobs no remaining record references",
		Long: `purge deletes the records of the selected destinations (--dest, default all)
dead-lettered more than --older-than ago (24h, 30d, or an RFC 3339 time),
pending and replayed alike (--replayed-only keeps pending ones), optionally of
some classes only. Records a replayer holds under a live lease are never
deleted. It asks for confirmation first unless --yes is given.

Shared blobs are safe. Identical geometries are offloaded once and shared by
every envelope that carries them, so after deleting records purge collects the
blobs of --blobs with offload.Offloader.Sweep against the offload URIs of every
remaining record of the store (any destination, replayed or not): a blob no
record references and older than --blob-grace is moved to quarantine
(<prefix>/gc-trash/…), and deleted for good by a later purge once it has been
there for --blob-grace; a quarantined blob that a new envelope references again
(a producer deduplicated onto it meanwhile) is restored. Without --blobs, or
with --keep-blobs — needed when several stores share one blob store — blobs are
left alone.

A progress bar (or JSON records on stderr) counts the records read while the
remaining references are collected.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.purge(cmd, o) },
	}
	fs := cmd.Flags()
	fs.StringVar(&o.olderThan, "older-than", "", "delete records dead-lettered before this long ago (30d, 24h) or this RFC 3339 time; required")
	fs.StringSliceVar(&o.classes, "class", nil, "delete only records of these failure classes")
	fs.BoolVar(&o.replayedOnly, "replayed-only", false, "keep records that were never replayed")
	fs.BoolVarP(&o.yes, "yes", "y", false, "do not ask for confirmation")
	fs.BoolVar(&o.dryRun, "dry-run", false, "report what would be deleted; delete nothing")
	fs.BoolVar(&o.keepBlobs, "keep-blobs", false, "delete records only, never blobs (for blob stores shared by several stores)")
	fs.DurationVar(&o.grace, "blob-grace", offload.DefaultSweepMinAge, "unreferenced blobs younger than this are kept; quarantined ones are deleted after this long")
	o.out = addOutput(cmd, fmtTable, fmtJSON)
	return cmd
}

func (a *app) purge(cmd *cobra.Command, o purgeOptions) (err error) {
	if err := o.out.resolve(a, cmd); err != nil {
		return err
	}
	if o.olderThan == "" {
		return usageFor(cmd, "purge needs --older-than (for example 30d)")
	}
	before, err := parseWhen(o.olderThan, time.Now())
	if err != nil {
		return usageFor(cmd, "--older-than: %v", err)
	}
	var classes []classify.Class
	for _, c := range o.classes {
		cl, err := classify.ParseClass(c)
		if err != nil {
			return usageFor(cmd, "--class %q: want one of %s", c, strings.Join(classNames(), ", "))
		}
		classes = append(classes, cl)
	}
	if o.grace < 0 {
		return usageFor(cmd, "--blob-grace must not be negative")
	}
	ctx := cmd.Context()
	acc := readWrite
	if o.dryRun {
		acc = readOnly
	}
	s, err := a.openStore(ctx, acc)
	if err != nil {
		return err
	}
	defer closeWith(&err, s)
	blobAcc := readWrite
	if o.dryRun || o.keepBlobs {
		blobAcc = readOnly
	}
	off, closeBlobs, err := a.openBlobs(ctx, blobAcc)
	if err != nil {
		return err
	}
	defer closeBlobs()
	dests := a.dests
	if len(dests) == 0 {
		dests = []string{""}
	}
	runAll := func(dry bool) (purgeReport, error) {
		rep := purgeReport{DryRun: dry, Before: stamp(before), Destinations: []purgeDest{}, Unreferenced: []string{}}
		for _, d := range dests {
			req := broker.PurgeRequest{Destination: d, Filter: broker.Filter{Until: before, Classes: classes},
				IncludePending: !o.replayedOnly, DryRun: dry}
			res, err := s.Purge(ctx, req)
			if errors.Is(err, errors.ErrUnsupported) {
				return rep, usageFor(cmd, "this store (%s) cannot purge", s.Name())
			}
			if err != nil {
				return rep, err
			}
			name := d
			if name == "" {
				name = allDestinations
			}
			ids := []string{}
			for _, id := range res.IDs {
				if d == "" {
					id = id[strings.LastIndexByte(id, '/')+1:] // "destination/id": the id
				}
				ids = append(ids, id)
			}
			rep.Destinations = append(rep.Destinations, purgeDest{Destination: name, IDs: ids})
			rep.Records += len(res.IDs)
			rep.Unreferenced = append(rep.Unreferenced, res.Orphaned...)
		}
		return rep, nil
	}

	// A dry run first, for the question (or as the whole run with
	// --dry-run); with --yes nothing is asked, and the purge reports what
	// it deleted: the records' ids are held once, not twice.
	var rep purgeReport
	if o.dryRun || !o.yes {
		if rep, err = runAll(true); err != nil {
			return err
		}
	}
	if !o.dryRun && !o.yes && rep.Records > 0 {
		fmt.Fprintf(a.stderr, "Delete %d records dead-lettered before %s", rep.Records, shortTime(rep.Before))
		if len(rep.Unreferenced) > 0 {
			fmt.Fprintf(a.stderr, " (the last references to %d blobs)", len(rep.Unreferenced))
		}
		fmt.Fprint(a.stderr, "? [y/N] ")
		answer, rerr := bufio.NewReader(a.stdin).ReadString('\n')
		if rerr != nil && (rerr != io.EOF || answer == "") {
			return usageFor(cmd, "no confirmation on standard input: pass --yes to purge without asking")
		}
		if ans := strings.ToLower(strings.TrimSpace(answer)); ans != "y" && ans != "yes" {
			fmt.Fprintln(a.stderr, "aborted; nothing deleted")
			return nil
		}
	}
	// A dry run's sweep must not count the references of the records it
	// would delete; a real purge has deleted them.
	var purged map[string]bool
	if o.dryRun {
		purged = map[string]bool{}
		for _, d := range rep.Destinations {
			for _, id := range d.IDs {
				purged[d.Destination+"/"+id] = true
			}
		}
	}
	if !o.dryRun && (o.yes || rep.Records > 0) {
		rep = purgeReport{} // the dry run's ids go before the purge's arrive
		if rep, err = runAll(false); err != nil {
			return err
		}
	}
	switch {
	case o.keepBlobs:
		rep.BlobsKept = "--keep-blobs"
	case off == nil:
		rep.BlobsKept = "no --blobs"
	default:
		sum, err := a.sweep(ctx, s, off, o, purged)
		if err != nil {
			return err
		}
		rep.Sweep = sum
	}
	if o.out.json() {
		return writeJSON(a.stdout, rep)
	}
	verb := "deleted"
	if o.dryRun {
		verb = "would delete"
	}
	for _, d := range rep.Destinations {
		if len(d.IDs) > 0 {
			fmt.Fprintf(a.stdout, "%s %d records from %s: %s\n", verb, len(d.IDs), d.Destination, strings.Join(d.IDs, " "))
		}
	}
	if rep.Records == 0 {
		fmt.Fprintf(a.stdout, "no records dead-lettered before %s match\n", shortTime(rep.Before))
	}
	for _, u := range rep.Unreferenced {
		fmt.Fprintf(a.stdout, "no remaining record references %s\n", u)
	}
	if rep.BlobsKept != "" {
		fmt.Fprintf(a.stdout, "blobs left alone (%s)\n", rep.BlobsKept)
	}
	if sw := rep.Sweep; sw != nil {
		fmt.Fprintf(a.stdout, "blob sweep (grace %s): %d blobs, %d referenced, %d too young; quarantined %d, restored %d, deleted %d for good, %d waiting in quarantine\n",
			sw.Grace, sw.Listed, sw.Referenced, sw.Young, len(sw.Quarantined), len(sw.Restored), len(sw.Deleted), sw.Pending)
		for _, k := range sw.Quarantined {
			fmt.Fprintf(a.stdout, "  quarantined %s\n", k)
		}
		for _, k := range sw.Restored {
			fmt.Fprintf(a.stdout, "  restored %s\n", k)
		}
		for _, k := range sw.Deleted {
			fmt.Fprintf(a.stdout, "  deleted %s\n", k)
		}
	}
	return nil
}

// sweep collects the blobs of off that no remaining record of s
// references (in a dry run: no record outside purged).
func (a *app) sweep(ctx context.Context, s *broker.Store, off *offload.Offloader, o purgeOptions, purged map[string]bool) (*sweepSummary, error) {
	var uris []string
	m := a.startMeter("purge: collecting blob references", "records", -1)
	defer m.finish()
	// The references are read from the records' summaries (the offload
	// URIs the store keeps beside each body, whole), never from their
	// bodies: memory follows the page, not the records' size.
	err := s.ScanAll(ctx, broker.ListOptions{IncludeReplayed: true, Limit: broker.MaxListLimit, Summaries: true}, func(e broker.Entry) error {
		m.add(1)
		if e.Record == nil || e.Summary == nil || !e.Summary.Envelope {
			return nil
		}
		if o.dryRun && (purged[e.Record.Destination+"/"+e.Record.ID] || purged[allDestinations+"/"+e.Record.ID]) {
			return nil
		}
		for _, u := range []string{e.Summary.GeometryOffloadURI, e.Summary.PayloadOffloadURI} {
			if u != "" {
				uris = append(uris, u)
			}
		}
		return nil
	})
	m.finish()
	if errors.Is(err, errors.ErrUnsupported) {
		return nil, usagef("this store cannot enumerate its records, so blobs cannot be collected safely: pass --keep-blobs")
	}
	if err != nil {
		return nil, fmt.Errorf("collecting blob references: %w", err)
	}
	grace := o.grace
	if grace == 0 {
		grace = -1 // Sweep reads 0 as its default; negative is zero
	}
	r, err := off.Sweep(ctx, offload.LiveURIs(uris...), &offload.SweepOptions{MinAge: grace, DryRun: o.dryRun, Logger: a.logger()})
	if err != nil {
		return nil, fmt.Errorf("blob sweep: %w", err)
	}
	nz := func(s []string) []string {
		if s == nil {
			return []string{}
		}
		return s
	}
	return &sweepSummary{Grace: o.grace.String(), Listed: r.Listed, Referenced: r.Referenced, Young: r.Young,
		Quarantined: nz(r.Quarantined), Restored: nz(r.Restored), Deleted: nz(r.Deleted), Pending: r.Pending}, nil
}
