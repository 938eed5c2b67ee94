package main

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/cmd/geodlq/internal/console"
	"github.com/geodlq/geodlq/offload"
)

// blobCheck is verify's report on one blob. Field names are stable.
type blobCheck struct {
	URI     string   `json:"uri"`
	Kind    string   `json:"kind"` // geometry or payload
	Size    int64    `json:"size"`
	SHA256  string   `json:"sha256"`
	Status  string   `json:"status"` // ok, missing, forbidden_uri, truncated, extended, hash_mismatch, bad_ref, error
	Detail  string   `json:"detail,omitempty"`
	Records []string `json:"records"`
	base    string   // the base URI a forbidden URI is under, when it shows one
}

func newVerifyCmd(a *app) *cobra.Command {
	var f filterFlags
	var out *output
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Re-hash every offloaded blob the store's envelopes reference",
		Long: `verify reads every blob that the selected envelopes (pending and replayed) point
at — offloaded geometries and whole payloads — from --blobs, and checks its
size and SHA-256 against the envelope. Each blob is read once however many
envelopes share it. A blob store's special files (a FIFO, a device) and links
leading outside it are refused, never opened. Exit code 1 when a blob is
missing, altered, or addressed outside --blobs.

The store and the blobs are opened read-only. A progress bar (or JSON records
on stderr) counts the blobs checked; -o table lists the blobs that are not
ok, -o wide every blob, -o json and jsonl every blob as data.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			if err := out.resolve(a, cmd); err != nil {
				return err
			}
			f.all = true
			sel, err := f.parse(cmd, time.Now())
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			s, err := a.openStore(ctx, readOnly)
			if err != nil {
				return err
			}
			defer closeWith(&err, s)
			refs := map[string]*blobCheck{}
			// Summaries name each record's offloaded blobs; only a record
			// that has some is read whole, for the blobs' sizes and sums.
			err = a.eachSummary(ctx, s, sel, func(se broker.Entry) error {
				if sum := se.Summary; !sum.Envelope || (sum.GeometryOffloadURI == "" && sum.PayloadOffloadURI == "") {
					return nil
				}
				it, ok, err := a.loadRecord(ctx, s, se.Record.Destination, se.Record.ID)
				if err != nil || !ok {
					return err
				}
				e := it.env
				if e == nil || !sel.keep(it) {
					return nil
				}
				add := func(kind, uri string, size int64, sum string) {
					k := uri + "\x00" + strconv.FormatInt(size, 10) + "\x00" + sum
					b := refs[k]
					if b == nil {
						b = &blobCheck{URI: uri, Kind: kind, Size: size, SHA256: sum}
						refs[k] = b
					}
					b.Records = append(b.Records, it.Record.Destination+"/"+it.Record.ID)
				}
				if u := e.Geometry.OffloadURI; u != "" {
					add("geometry", u, e.Geometry.ByteSize, e.Geometry.ContentSHA256)
				}
				if u := e.RawPayloadOffloadURI; u != "" {
					add("payload", u, e.PayloadSize, e.PayloadSHA256)
				}
				return nil
			})
			if err != nil {
				return err
			}
			off, closeBlobs, err := a.openBlobs(ctx, readOnly)
			if err != nil {
				return err
			}
			defer closeBlobs()
			if off == nil && len(refs) > 0 {
				return usageFor(cmd, "%d offloaded blobs are referenced: pass --blobs to verify them", len(refs))
			}
			checks := make([]*blobCheck, 0, len(refs))
			for _, b := range refs {
				checks = append(checks, b)
			}
			sort.Slice(checks, func(i, j int) bool { return checks[i].URI < checks[j].URI })
			bad := 0
			m := a.startMeter("verify", "blobs", int64(len(checks)))
			defer m.finish()
			for _, b := range checks {
				if err := ctx.Err(); err != nil {
					return err
				}
				_, ferr := off.Fetch(ctx, offload.Ref{URI: b.URI, Size: b.Size, SHA256: b.SHA256})
				if ctx.Err() != nil {
					return ctx.Err()
				}
				b.Status, b.Detail = blobStatus(ferr)
				if ue := (*offload.URIError)(nil); errors.As(ferr, &ue) {
					b.base = ue.Base
				}
				m.add(1)
				m.count(b.Status, 1)
				if b.Status != "ok" {
					bad++
				}
			}
			m.finish()
			switch {
			case out.jsonl():
				for _, b := range checks {
					if err := writeJSONLine(a.stdout, b); err != nil {
						return err
					}
				}
			case out.json():
				if err := writeJSON(a.stdout, struct {
					Blobs []*blobCheck `json:"blobs"`
					OK    int          `json:"ok"`
					Bad   int          `json:"bad"`
				}{checks, len(checks) - bad, bad}); err != nil {
					return err
				}
			default:
				rows := make([][]string, 0, len(checks))
				for _, b := range checks {
					if b.Status == "ok" && !out.wide() {
						continue
					}
					rows = append(rows, []string{b.Status, b.Kind, b.URI, strconv.FormatInt(b.Size, 10), strings.Join(b.Records, " "), orDash(b.Detail)})
				}
				if len(rows) > 0 {
					if err := a.table(out, []string{"STATUS", "KIND", "URI", "BYTES", "RECORDS", "DETAIL"}, rows, 5, 4, 2); err != nil {
						return err
					}
					fmt.Fprintln(a.stdout)
				}
				fmt.Fprintf(a.stdout, "%d blobs referenced: %d ok, %d missing or altered\n", len(checks), len(checks)-bad, bad)
				if hint := forbiddenHint(checks); hint != "" {
					fmt.Fprintln(a.stdout, hint)
				}
			}
			if bad > 0 {
				return &problemsError{}
			}
			return nil
		},
	}
	f.register(cmd.Flags(), false)
	out = addOutput(cmd, fmtTable, fmtWide, fmtJSON, fmtJSONL)
	return cmd
}

// blobStatus names what Fetch found.
func blobStatus(err error) (string, string) {
	var ie *offload.IntegrityError
	switch {
	case err == nil:
		return "ok", ""
	case errors.Is(err, offload.ErrNotFound):
		return "missing", ""
	case errors.Is(err, offload.ErrForbiddenURI):
		return "forbidden_uri", err.Error() + "; " + console.BlobsHint(err)
	case errors.As(err, &ie):
		return string(ie.Problem), ie.Error()
	}
	return "error", err.Error()
}

// forbiddenHint says, when blobs were refused for their URI, how many and
// which flag points verify at them: --blobs-base (with the base the URIs
// are under, when they show one). "" when none was.
func forbiddenHint(checks []*blobCheck) string {
	n, bases := 0, map[string]bool{}
	for _, b := range checks {
		if b.Status != "forbidden_uri" {
			continue
		}
		n++
		if base := b.base; base != "" {
			bases[base] = true
		}
	}
	if n == 0 {
		return ""
	}
	if len(bases) == 1 {
		for base := range bases {
			return fmt.Sprintf("%d blobs are addressed outside --blobs: they were written under %s; pass --blobs-base %s (with --blobs naming where they are now)", n, base, base)
		}
	}
	return fmt.Sprintf("%d blobs are addressed outside --blobs: if they were written under another base URI, pass it as --blobs-base (and their prefix as --blobs-prefix)", n)
}
