package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/cmd/geodlq/internal/stores"
	"github.com/geodlq/geodlq/offload"
)

type purgeOptions struct {
	olderThan    string
	classes      []string
	replayedOnly bool
	yes          bool
	dryRun       bool
	keepBlobs    bool
}

// purgeReport is what purge writes with --json. Field names are stable.
type purgeReport struct {
	DryRun       bool         `json:"dry_run"`
	Before       string       `json:"before"`
	Records      int          `json:"records"`
	Destinations []purgeDest  `json:"destinations"`
	Blobs        []purgedBlob `json:"blobs"`
}

type purgeDest struct {
	Destination string   `json:"destination"`
	IDs         []string `json:"ids"`
}

type purgedBlob struct {
	URI    string `json:"uri"`
	Status string `json:"status"` // deleted, would_delete, kept_referenced, kept_no_blobs, kept_by_flag, already_gone, kept_foreign, delete_failed
	Detail string `json:"detail,omitempty"`
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

Shared blobs are safe: identical geometries are offloaded once and shared by
every envelope that carries them, so a blob is deleted (from --blobs) only when
no remaining record of the store — in any destination, replayed or not —
references it; the store checks that in the same transaction as the delete.
If several stores share one blob store, pass --keep-blobs. A producer that
deduplicates onto an old blob while purge runs could be left pointing at a
deleted blob: purge when producers are quiet, and run verify afterwards.`,
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
	return cmd
}

func (a *app) purge(cmd *cobra.Command, o purgeOptions) (err error) {
	if o.olderThan == "" {
		return usagef("purge needs --older-than (for example 30d)")
	}
	before, err := parseWhen(o.olderThan, time.Now())
	if err != nil {
		return usagef("--older-than: %v", err)
	}
	for _, c := range o.classes {
		if _, err := classify.ParseClass(c); err != nil {
			return usagef("--class %q: want one of %s", c, strings.Join(classNames(), ", "))
		}
	}
	ctx := cmd.Context()
	s, err := a.openStore(ctx, false)
	if err != nil {
		return err
	}
	defer closeWith(&err, s)
	p, ok := s.(stores.Purger)
	if !ok {
		return usagef("this store does not support purge")
	}
	off, closeBlobs, err := a.openBlobs(ctx, false)
	if err != nil {
		return err
	}
	defer closeBlobs()
	dests := a.dests
	if len(dests) == 0 {
		dests = []string{""}
	}
	req := stores.PurgeRequest{Before: before, Classes: o.classes, ReplayedOnly: o.replayedOnly, DryRun: true}
	runAll := func(dry bool) (purgeReport, []string, error) {
		rep := purgeReport{DryRun: dry, Before: stamp(before), Destinations: []purgeDest{}, Blobs: []purgedBlob{}}
		var orphaned []string
		for _, d := range dests {
			r := req
			r.Destination, r.DryRun = d, dry
			res, err := p.Purge(ctx, r)
			if err != nil {
				return rep, nil, err
			}
			name := d
			if name == "" {
				name = "*"
			}
			rep.Destinations = append(rep.Destinations, purgeDest{Destination: name, IDs: append([]string{}, res.IDs...)})
			rep.Records += len(res.IDs)
			orphaned = append(orphaned, res.Orphaned...)
			for _, u := range res.BlobURIs {
				if !contains(res.Orphaned, u) {
					rep.Blobs = append(rep.Blobs, purgedBlob{URI: u, Status: "kept_referenced"})
				}
			}
		}
		return rep, orphaned, nil
	}

	preview, orphaned, err := runAll(true)
	if err != nil {
		return err
	}
	if !o.dryRun && !o.yes && preview.Records > 0 {
		fmt.Fprintf(a.stderr, "Delete %d records dead-lettered before %s", preview.Records, shortTime(preview.Before))
		if len(orphaned) > 0 && off != nil && !o.keepBlobs {
			fmt.Fprintf(a.stderr, " and %d blobs no other record references", len(orphaned))
		}
		fmt.Fprint(a.stderr, "? [y/N] ")
		answer, rerr := bufio.NewReader(a.stdin).ReadString('\n')
		if rerr != nil && (rerr != io.EOF || answer == "") {
			return usagef("no confirmation on standard input: pass --yes to purge without asking")
		}
		if ans := strings.ToLower(strings.TrimSpace(answer)); ans != "y" && ans != "yes" {
			fmt.Fprintln(a.stderr, "aborted; nothing deleted")
			return nil
		}
	}
	rep, orph := preview, orphaned
	if !o.dryRun && preview.Records > 0 {
		if rep, orph, err = runAll(false); err != nil {
			return err
		}
	}
	failed := 0
	for _, u := range orph {
		b := purgedBlob{URI: u}
		switch {
		case o.keepBlobs:
			b.Status = "kept_by_flag"
		case off == nil:
			b.Status = "kept_no_blobs"
		case o.dryRun:
			b.Status = "would_delete"
		default:
			b.Status, b.Detail = deleteBlob(cmd, off, u)
			if b.Status == "delete_failed" {
				failed++
			}
		}
		rep.Blobs = append(rep.Blobs, b)
	}
	if a.json {
		if err := writeJSON(a.stdout, rep); err != nil {
			return err
		}
	} else {
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
		for _, b := range rep.Blobs {
			fmt.Fprintf(a.stdout, "blob %s: %s%s\n", b.URI, strings.ReplaceAll(b.Status, "_", " "), suffix(b.Detail))
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d blobs could not be deleted", failed)
	}
	return nil
}

// deleteBlob deletes the blob at uri, which must lie under off's base.
func deleteBlob(cmd *cobra.Command, off *offload.Offloader, uri string) (string, string) {
	key, err := off.KeyFor(uri)
	if err != nil {
		return "kept_foreign", err.Error()
	}
	switch err := off.Store().Delete(cmd.Context(), key); {
	case err == nil:
		return "deleted", ""
	case errors.Is(err, offload.ErrNotFound):
		return "already_gone", ""
	default:
		return "delete_failed", err.Error()
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func suffix(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}
