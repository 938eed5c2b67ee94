package main

import (
	"errors"
	"strconv"
	"time"

	"github.com/spf13/cobra"
)

func newListCmd(a *app) *cobra.Command {
	var f filterFlags
	var limit int
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List dead-lettered records, filtered",
		Long: `list prints the dead-lettered records of the selected destinations (--dest,
default all), oldest first: pending ones, and replayed ones too with --all.

Class, stage, EPSG, time range and bounding box are filtered by the store where
it can; reason kind and source prefix are filtered here.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			sel, err := f.parse(time.Now())
			if err != nil {
				return err
			}
			if limit < 0 {
				return usagef("--limit must not be negative")
			}
			ctx := cmd.Context()
			s, err := a.openStore(ctx, false)
			if err != nil {
				return err
			}
			defer closeWith(&err, s)
			var views []view
			err = a.eachRecord(ctx, s, sel, func(it item) error {
				if limit > 0 && len(views) >= limit {
					return errStop
				}
				views = append(views, viewOf(it))
				return nil
			})
			if err != nil && !errors.Is(err, errStop) {
				return err
			}
			if views == nil {
				views = []view{}
			}
			if a.json {
				return writeJSON(a.stdout, views)
			}
			rows := make([][]string, 0, len(views))
			for _, v := range views {
				rows = append(rows, listRow(v))
			}
			return table(a.stdout, []string{"ID", "DEST", "STATUS", "EVENT", "CLASS", "STAGE", "REASON", "AT", "EPSG", "DEAD-LETTERED"}, rows)
		},
	}
	f.register(cmd.Flags(), true)
	cmd.Flags().IntVar(&limit, "limit", 0, "list at most this many records (0: all)")
	return cmd
}

func listRow(v view) []string {
	if !v.Envelope {
		what := "(message)"
		if r := v.Headers["dlq-replay-of"]; r != "" {
			what = "(replay of " + r + ")"
		}
		return []string{v.ID, v.Destination, orDash(v.Status), orDash(v.EventID), what, "-", "-", "-", "-", orDash(shortTime(v.PublishedAt))}
	}
	reason := v.Reason
	if reason == "" {
		reason = v.ErrorMessage
	}
	return []string{v.ID, v.Destination, orDash(v.Status), v.EventID, v.FailureClass, v.FailedStage, clip(reason, 40),
		where(v.Location, v.Fault), strconv.Itoa(v.EPSG), shortTime(v.DeadLetteredAt)}
}

// shortTime renders an RFC 3339 stamp to the second.
func shortTime(s string) string {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return s
	}
	return t.UTC().Format("2006-01-02T15:04:05Z")
}
