package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/geodlq/geodlq/cmd/geodlq/internal/console"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/jsonscan"
	"github.com/geodlq/geodlq/offload"
)

func newShowCmd(a *app) *cobra.Command {
	var raw bool
	var out *output
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show one record: its envelope and the restored, verified payload",
		Long: `show prints a record — named by its record id, DEST/ID, or its event id — its
envelope, and the original payload restored byte for byte (offloaded parts
fetched from --blobs and verified against their SHA-256, the whole payload
against payload_sha256).

--raw writes only the exact payload bytes to standard output; -o json writes
the record, its envelope and the payload as one document. Exit code 1 when
the payload fails verification.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			if err := out.resolve(a, cmd); err != nil {
				return err
			}
			ctx := cmd.Context()
			s, err := a.openStore(ctx, readOnly)
			if err != nil {
				return err
			}
			defer closeWith(&err, s)
			it, err := a.findRecord(ctx, s, args[0])
			if err != nil {
				return err
			}
			off, closeBlobs, err := a.openBlobs(ctx, readOnly)
			if err != nil {
				return err
			}
			defer closeBlobs()
			payload, perr := restore(ctx, it, off)
			if raw {
				if perr != nil {
					return restoreError(perr)
				}
				_, err := a.stdout.Write(payload)
				return err
			}
			if out.json() {
				doc := struct {
					Record          view            `json:"record"`
					Envelope        json.RawMessage `json:"envelope,omitempty"`
					Payload         *string         `json:"payload,omitempty"`
					PayloadBase64   string          `json:"payload_base64,omitempty"`
					PayloadVerified bool            `json:"payload_verified"`
					PayloadError    string          `json:"payload_error,omitempty"`
				}{Record: viewOf(it, "")}
				if it.env != nil {
					doc.Envelope = it.Record.Message.Body
				}
				switch {
				case perr != nil:
					doc.PayloadError = perr.Error()
				case utf8.Valid(payload):
					p := string(payload)
					doc.Payload = &p
				default:
					doc.PayloadBase64 = base64.StdEncoding.EncodeToString(payload)
				}
				doc.PayloadVerified = perr == nil && it.env != nil
				// One top-level member per line, each value compact: the
				// envelope is untrusted JSON, and indenting a deeply nested
				// document makes it quadratically larger.
				b, err := json.Marshal(doc)
				if err != nil {
					return err
				}
				if _, err := a.stdout.Write(append(memberPerLine(b), '\n')); err != nil {
					return err
				}
				return restoreError(perr)
			}
			a.showText(it, payload, perr)
			return restoreError(perr)
		},
	}
	cmd.Flags().BoolVar(&raw, "raw", false, "write only the exact payload bytes")
	out = addOutput(cmd, fmtTable, fmtJSON)
	return cmd
}

// restore returns the record's original payload, verified; for a record
// that is not an envelope, its body.
func restore(ctx context.Context, it item, off *offload.Offloader) ([]byte, error) {
	if it.env == nil {
		return it.Record.Message.Body, nil
	}
	e := it.env
	if off == nil && (e.Geometry.OffloadURI != "" || e.RawPayloadOffloadURI != "") {
		return nil, errNoBlobs
	}
	var f envelope.Fetcher
	if off != nil {
		f = off
	}
	return e.Restore(ctx, f)
}

// restoreError maps a failed restore to an exit status: integrity
// failures are problems found (1), a missing --blobs a usage error (2),
// anything else a store error (3).
func restoreError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errNoBlobs):
		return &usageError{err: err}
	case errors.Is(err, offload.ErrIntegrity), errors.Is(err, offload.ErrNotFound), errors.Is(err, offload.ErrForbiddenURI):
		msg := "payload: " + err.Error()
		if h := console.BlobsHint(err); h != "" {
			msg += "; " + h
		}
		return &problemsError{msg: msg}
	}
	return err
}

func (a *app) showText(it item, payload []byte, perr error) {
	v := viewOf(it, "")
	w := a.stdout
	line := func(k, val string) {
		if val != "" {
			fmt.Fprintf(w, "%-13s %s\n", k, terminalSafe(val, false))
		}
	}
	status := v.Status
	if v.ReplayedAt != "" {
		status += " " + shortTime(v.ReplayedAt)
	}
	line("record", v.Destination+"/"+v.ID+"  ("+status+")")
	if it.env == nil {
		line("event", v.EventID)
		line("key", keyText(v))
		keys := make([]string, 0, len(v.Headers))
		for k := range v.Headers {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			line("header", k+": "+v.Headers[k])
		}
		fmt.Fprintf(w, "\nbody (%d bytes, not an envelope):\n%s\n", len(payload), printable(payload))
		return
	}
	e := it.env
	line("event", v.EventID)
	line("key", keyText(v))
	line("class", v.FailureClass+" at "+v.FailedStage+" (destination "+string(e.Route)+")")
	if v.Reason != "" {
		line("reason", v.Reason+" ("+orDash(v.ReasonKind)+")")
	}
	if v.ErrorMessage != v.Reason {
		line("error", v.ErrorMessage)
	}
	if v.Location != nil || v.Fault != nil {
		line("at", where(v.Location, v.Fault))
	}
	crs := "-"
	if v.EPSG != 0 {
		crs = fmt.Sprintf("EPSG:%d", v.EPSG)
	}
	if v.SourceCRS != "" {
		crs += " (declared " + v.SourceCRS + ")"
	}
	line("crs", crs)
	geom := "inline"
	switch {
	case e.Geometry.Missing:
		geom = "missing"
	case e.Geometry.OffloadURI != "":
		geom = "offloaded to " + e.Geometry.OffloadURI
	}
	line("geometry", fmt.Sprintf("%s, %d vertices, %d bytes, %s", orDash(v.GeometryType), v.VertexCount, v.GeometryBytes, geom))
	line("attempts", fmt.Sprintf("%d (first seen %s, dead-lettered %s)", v.Attempts, shortTime(v.FirstSeenAt), shortTime(v.DeadLetteredAt)))
	if e.Source != nil {
		line("source", strings.TrimSpace(e.Source.System+" "+e.Source.Topic+" "+e.Source.MessageID))
	}
	line("source_uri", v.SourceURI)
	fmt.Fprintf(w, "\nenvelope:\n%s\n", terminalSafe(string(memberPerLine(it.Record.Message.Body)), true))
	switch {
	case perr != nil:
		fmt.Fprintf(w, "\npayload: NOT RESTORED: %v\n", perr)
	default:
		fmt.Fprintf(w, "\npayload (%d bytes, sha256 %s, verified):\n%s\n", len(payload), e.PayloadSHA256, printable(payload))
	}
}

// printable returns p for a terminal: as is when it is UTF-8 text, else
// a note (use --raw for the bytes).
func printable(p []byte) string {
	const most = 4096
	if len(p) > most*4 {
		cut := most
		for cut > 0 && !utf8.RuneStart(p[cut]) {
			cut--
		}
		return printable(p[:cut]) + fmt.Sprintf("… (%d more bytes; use --raw)", len(p)-cut)
	}
	if utf8.Valid(p) && bytes.IndexByte(p, 0) < 0 {
		// Text, but hostile text: escape sequences are shown, not run.
		return terminalSafe(string(p), true)
	}
	return fmt.Sprintf("(%d bytes that are not UTF-8 text; use --raw)", len(p))
}

// memberPerLine writes a JSON object with one top-level member per line,
// each value exactly as it is in b; anything else is returned as is.
func memberPerLine(b []byte) []byte {
	if len(b) == 0 || b[0] != '{' {
		return b
	}
	out := []byte("{")
	i := 1
	for n := 0; ; n++ {
		ks, ke, err := jsonscan.Skip(b, i)
		if err != nil || b[ks] != '"' {
			return b
		}
		j := ke
		for j < len(b) && (b[j] == ' ' || b[j] == '\n' || b[j] == '\t' || b[j] == '\r') {
			j++
		}
		if j >= len(b) || b[j] != ':' {
			return b
		}
		vs, ve, err := jsonscan.Skip(b, j+1)
		if err != nil {
			return b
		}
		if n > 0 {
			out = append(out, ',')
		}
		out = append(out, "\n  "...)
		out = append(out, b[ks:ke]...)
		out = append(out, ": "...)
		out = append(out, b[vs:ve]...)
		i = ve
		for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
			i++
		}
		if i < len(b) && b[i] == ',' {
			i++
			continue
		}
		if i < len(b) && b[i] == '}' {
			return append(out, "\n}"...)
		}
		return b
	}
}

// keyText is the idempotency key as show prints it: "(derived)" after a
// key geodlq derived because the event came without one.
func keyText(v view) string {
	if v.KeyDerived && v.IdempotencyKey != "" {
		return v.IdempotencyKey + " (derived)"
	}
	return v.IdempotencyKey
}
