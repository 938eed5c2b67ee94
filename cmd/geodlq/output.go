package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/jedib0t/go-pretty/v6/table"
	"github.com/jedib0t/go-pretty/v6/text"
	"github.com/spf13/cobra"
)

// The output formats of -o. Every command that prints a report takes -o;
// the ones that list records take all four.
const (
	fmtTable = "table" // for people: aligned columns fitted to the terminal
	fmtWide  = "wide"  // for people: every column, nothing cut
	fmtJSON  = "json"  // one JSON document, stable field names
	fmtJSONL = "jsonl" // one JSON object per line, as records stream
)

// output is a command's -o flag.
type output struct {
	format  string
	allowed []string
}

// addOutput registers -o on cmd with the given formats (the first is the
// default).
func addOutput(cmd *cobra.Command, allowed ...string) *output {
	o := &output{format: allowed[0], allowed: allowed}
	cmd.Flags().StringVarP(&o.format, "output", "o", allowed[0], "output format: "+strings.Join(allowed, ", "))
	return o
}

// resolve checks -o (and the deprecated --json) for cmd.
func (o *output) resolve(a *app, cmd *cobra.Command) error {
	if a.json && !cmd.Flags().Changed("output") {
		o.format = fmtJSON
	}
	if !slices.Contains(o.allowed, o.format) {
		if strings.ContainsAny(o.format, "./") {
			return usageFor(cmd, "-o %q: -o is the output format (%s); name a file as an argument: %s",
				o.format, strings.Join(o.allowed, ", "), cmd.UseLine())
		}
		return usageFor(cmd, "-o %q: want %s", o.format, strings.Join(o.allowed, ", "))
	}
	return nil
}

func (o *output) json() bool  { return o.format == fmtJSON }
func (o *output) jsonl() bool { return o.format == fmtJSONL }
func (o *output) wide() bool  { return o.format == fmtWide }
func (o *output) text() bool  { return o.format == fmtTable || o.format == fmtWide }

// writeJSON writes v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// writeJSONLine writes v as one line of JSON.
func writeJSONLine(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// tbl is a table for people, drawn by go-pretty: columns separated by two
// spaces, no borders (the kubectl look), widths measured in terminal
// cells. Columns marked flexible are cut (with "…") so that the table fits
// width; wide tables and width 0 are never cut.
type tbl struct {
	header []string
	rows   [][]string
	flex   []int // indexes of the columns that may be cut, most expendable first
	// minWidths, when set, are the widths of an earlier table whose rows
	// this one continues (list --follow).
	minWidths []int
}

// minFlex is the narrowest a flexible column is cut to.
const minFlex = 16

func (t *tbl) widths() []int {
	w := make([]int, len(t.header))
	for i, h := range t.header {
		w[i] = text.StringWidthWithoutEscSequences(h)
	}
	for _, r := range t.rows {
		for i, c := range r {
			if i < len(w) {
				w[i] = max(w[i], text.StringWidthWithoutEscSequences(c))
			}
		}
	}
	for i := range w {
		if i < len(t.minWidths) {
			w[i] = max(w[i], t.minWidths[i])
		}
	}
	return w
}

// fit returns each column's maximum width so that the table fits width
// (0: no maximum).
func (t *tbl) fit(width int) []int {
	w := t.widths()
	maxes := make([]int, len(w))
	if width <= 0 {
		return maxes
	}
	total := 2 * (len(w) - 1)
	for _, x := range w {
		total += x
	}
	// Two passes: every flexible column down to a comfortable width
	// first, most expendable first; then down to minFlex.
	for _, floor := range []int{2 * minFlex, minFlex} {
		for _, i := range t.flex {
			if total <= width {
				return maxes
			}
			cut := min(total-width, w[i]-floor)
			if cut > 0 {
				w[i] -= cut
				total -= cut
				maxes[i] = w[i]
			}
		}
	}
	return maxes
}

// ellipsis cuts s to n cells, ending with "…".
func ellipsis(s string, n int) string {
	if n <= 0 || text.StringWidthWithoutEscSequences(s) <= n {
		return s
	}
	return text.Trim(s, n-1) + "…"
}

// render writes the table; with header false, only its rows.
func (t *tbl) render(w io.Writer, width int, header bool) ([]int, error) {
	pw := table.NewWriter()
	style := table.StyleDefault
	style.Options = table.OptionsNoBordersAndSeparators
	style.Box.PaddingLeft, style.Box.PaddingRight = "", "  "
	style.Format.Header = text.FormatDefault
	style.Format.HeaderAlign = text.AlignLeft
	pw.SetStyle(style)
	maxes := t.fit(width)
	widths := t.widths()
	var cfg []table.ColumnConfig
	for i := range t.header {
		c := table.ColumnConfig{Number: i + 1, Align: text.AlignLeft}
		if maxes[i] > 0 {
			c.WidthMax = maxes[i]
			c.WidthMaxEnforcer = ellipsis
			widths[i] = maxes[i]
		}
		if i < len(t.minWidths) {
			c.WidthMin = t.minWidths[i]
		}
		cfg = append(cfg, c)
	}
	pw.SetColumnConfigs(cfg)
	if header {
		pw.AppendHeader(rowOf(t.header))
	}
	for _, r := range t.rows {
		pw.AppendRow(rowOf(r))
	}
	var b strings.Builder
	for _, line := range strings.Split(pw.Render(), "\n") {
		b.WriteString(strings.TrimRight(line, " "))
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return widths, err
}

func rowOf(ss []string) table.Row {
	r := make(table.Row, len(ss))
	for i, s := range ss {
		// A cell is one line: newlines and tabs of error messages would
		// break the table.
		r[i] = terminalSafe(strings.Join(strings.Fields(s), " "), false)
		if s == "" {
			r[i] = ""
		}
	}
	return r
}

// table writes header and rows for -o table (fitted, flex columns cut) or
// -o wide (nothing cut).
func (a *app) table(o *output, header []string, rows [][]string, flex ...int) error {
	t := &tbl{header: header, rows: rows, flex: flex}
	width := a.width
	if o != nil && o.wide() {
		width = 0
	}
	_, err := t.render(a.stdout, width, true)
	return err
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// terminalSafe returns s with everything a terminal would act on instead
// of print written as a Go escape: C0 controls (but newlines and tabs when
// keepLines), DEL, C1 controls (U+0080–U+009F, which include the 8-bit
// CSI), the bidirectional overrides and isolates that reorder what is
// shown (U+202A–U+202E, U+2066–U+2069), and bytes that are not UTF-8.
// Records are hostile input: an event id or a reason may carry an escape
// sequence that retitles the window, rewrites the screen or writes to the
// clipboard (OSC 52).
func terminalSafe(s string, keepLines bool) string {
	clean := true
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if unsafeRune(r, n, keepLines) {
			clean = false
			break
		}
		i += n
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unsafeRune(r, n, keepLines) && r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafeRune(r, n, keepLines):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func unsafeRune(r rune, n int, keepLines bool) bool {
	switch {
	case r == utf8.RuneError && n == 1:
		return true
	case r == '\n' || r == '\t':
		return !keepLines
	case r < 0x20, r >= 0x7f && r <= 0x9f:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}
