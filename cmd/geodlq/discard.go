package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/geodlq/geodlq/broker"
)

// discardReport is what discard writes with -o json. Field names are
// stable.
type discardReport struct {
	DryRun  bool     `json:"dry_run"`
	Deleted []string `json:"deleted"`
	// Unreferenced lists the blobs whose last reference was deleted (geodlq
	// purge --older-than … collects them).
	Unreferenced []string `json:"unreferenced_blobs"`
}

func newDiscardCmd(a *app) *cobra.Command {
	var yes, dryRun bool
	var out *output
	cmd := &cobra.Command{
		Use:   "discard ID…",
		Short: "Delete given dead-lettered records for good",
		Long: `discard deletes the records named as arguments — record ids, DEST/ID or event
ids (every record of the event) — pending or replayed, for good: for a record
that should never be replayed (a test event, a payload that must not be kept).
It asks for confirmation first unless --yes is given. A name that matches no
record is a usage error (exit 2) and nothing is deleted. Records a replayer
holds under a live lease are not deleted.

Blobs are not touched here: the offloaded geometries the deleted records were
the last to reference are listed, and geodlq purge collects them.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageFor(cmd, "name the records to discard: record ids, DEST/ID or event ids")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			if err := out.resolve(a, cmd); err != nil {
				return err
			}
			ctx := cmd.Context()
			s, err := a.openStore(ctx, readWrite)
			if err != nil {
				return err
			}
			defer closeWith(&err, s)
			rep := discardReport{DryRun: dryRun, Deleted: []string{}, Unreferenced: []string{}}
			byDest := map[string][]string{}
			var order, notFound []string
			for _, ref := range args {
				its, err := a.findRecords(ctx, s, ref)
				if err != nil {
					return err
				}
				if len(its) == 0 {
					notFound = append(notFound, ref)
					continue
				}
				for _, it := range its {
					d := it.Record.Destination
					if _, ok := byDest[d]; !ok {
						order = append(order, d)
					}
					byDest[d] = append(byDest[d], it.Record.ID)
				}
			}
			if len(notFound) > 0 {
				// Nothing is deleted when a name matches nothing: a typo
				// must not turn "discard these" into "discard some".
				return usageFor(cmd, "%s: %v; nothing deleted (geodlq list shows the records)", strings.Join(notFound, ", "), errNotFound)
			}
			n := 0
			for _, ids := range byDest {
				n += len(ids)
			}
			if !dryRun && !yes {
				fmt.Fprintf(a.stderr, "Delete %d records for good (%s)? [y/N] ", n, strings.Join(refsOf(order, byDest), " "))
				answer, rerr := bufio.NewReader(a.stdin).ReadString('\n')
				if rerr != nil && (rerr != io.EOF || answer == "") {
					return usageFor(cmd, "no confirmation on standard input: pass --yes to discard without asking")
				}
				if ans := strings.ToLower(strings.TrimSpace(answer)); ans != "y" && ans != "yes" {
					fmt.Fprintln(a.stderr, "aborted; nothing deleted")
					return nil
				}
			}
			for _, d := range order {
				res, err := s.Purge(ctx, broker.PurgeRequest{Destination: d, Filter: broker.Filter{IDs: byDest[d]}, IncludePending: true, DryRun: dryRun})
				if errors.Is(err, errors.ErrUnsupported) {
					return usageFor(cmd, "this store (%s) cannot delete given records", s.Name())
				}
				if err != nil {
					return err
				}
				for _, id := range res.IDs {
					rep.Deleted = append(rep.Deleted, d+"/"+id)
				}
				rep.Unreferenced = append(rep.Unreferenced, res.Orphaned...)
			}
			if out.json() {
				return writeJSON(a.stdout, rep)
			}
			verb := "deleted"
			if dryRun {
				verb = "would delete"
			}
			fmt.Fprintf(a.stdout, "%s %d records: %s\n", verb, len(rep.Deleted), strings.Join(rep.Deleted, " "))
			if kept := n - len(rep.Deleted); kept > 0 {
				fmt.Fprintf(a.stdout, "%d records were left: a replayer holds them under a lease; try again once it is done\n", kept)
			}
			for _, u := range rep.Unreferenced {
				fmt.Fprintf(a.stdout, "no remaining record references %s (geodlq purge collects it)\n", u)
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "report what would be deleted; delete nothing")
	out = addOutput(cmd, fmtTable, fmtJSON)
	return cmd
}

func refsOf(order []string, byDest map[string][]string) []string {
	var refs []string
	for _, d := range order {
		for _, id := range byDest[d] {
			refs = append(refs, d+"/"+id)
		}
	}
	return refs
}
