// Command testreport reads `go test -json` on standard input for make
// test, and makes a suite that cannot pass by skipping:
//
//   - it prints each package's result line, the whole output of every test
//     that failed or skipped, and the output of a package that failed
//     without a failing test (a build error, a panic in TestMain);
//   - it fails when a test skipped and the skip is not in the allowlist
//     (-allow FILE: lines "PACKAGE TEST REASON…", # comments; TEST is the
//     full name, subtests included; a * in PACKAGE or TEST matches any run
//     of characters, slashes included), when a test or package failed, when
//     an allowlist entry matched no skip (stale), or when no test ran;
//   - it prints the time of every package, slowest first (and writes the
//     table to -times FILE), then one closing line,
//     "tests: N passed, N failed, N skipped".
//
// Run as `go test -json … | go run ./internal/testreport -allow FILE`
// (with pipefail, so that go test's own exit status counts too).
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// event is one line of `go test -json` (test2json's TestEvent).
type event struct {
	Time    time.Time
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// allowed is one allowlist entry.
type allowed struct {
	pkg, test, reason string
	line              int
	used              bool
}

// report is what testreport gathered.
type report struct {
	passed, failed, skipped int
	badSkips                []string
	failures                []string
	pkgTime                 map[string]float64
	pkgResult               map[string]string
}

func main() {
	allowFile := flag.String("allow", "", "the skip allowlist (required)")
	timesFile := flag.String("times", "", "also write the per-package times to this file")
	flag.Parse()
	if *allowFile == "" {
		fmt.Fprintln(os.Stderr, "usage: go test -json … | testreport -allow FILE [-times FILE]")
		os.Exit(2)
	}
	f, err := os.Open(*allowFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	allow, err := parseAllowlist(f)
	f.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	r, err := run(os.Stdin, os.Stdout, allow)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	var times strings.Builder
	writeTimes(&times, r)
	fmt.Print(times.String())
	if *timesFile != "" {
		if err := os.WriteFile(*timesFile, []byte(times.String()), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "testreport:", err)
		}
	}
	problems := verdict(r, allow)
	for _, p := range problems {
		fmt.Println("testreport: FAIL:", p)
	}
	fmt.Printf("tests: %d passed, %d failed, %d skipped\n", r.passed, r.failed, r.skipped)
	if len(problems) > 0 {
		os.Exit(1)
	}
}

// parseAllowlist reads "PACKAGE TEST REASON…" lines; blank lines and
// lines starting with # are comments. Every entry must give a reason.
func parseAllowlist(rd io.Reader) ([]*allowed, error) {
	var out []*allowed
	sc := bufio.NewScanner(rd)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 3 {
			return nil, fmt.Errorf("allowlist line %d: want PACKAGE TEST REASON…, got %q", n, line)
		}
		out = append(out, &allowed{pkg: f[0], test: f[1], reason: strings.Join(f[2:], " "), line: n})
	}
	return out, sc.Err()
}

// run reads events from in and writes the human report to out.
func run(in io.Reader, out io.Writer, allow []*allowed) (*report, error) {
	r := &report{pkgTime: map[string]float64{}, pkgResult: map[string]string{}}
	outputs := map[[2]string]*strings.Builder{} // package, test → output
	dec := json.NewDecoder(in)
	for {
		var e event
		if err := dec.Decode(&e); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("reading go test -json: %w", err)
		}
		key := [2]string{e.Package, e.Test}
		switch e.Action {
		case "output":
			b := outputs[key]
			if b == nil {
				b = &strings.Builder{}
				outputs[key] = b
			}
			if b.Len() < 1<<20 {
				b.WriteString(e.Output)
			}
		case "pass", "fail", "skip":
			if e.Test == "" {
				r.pkgResult[e.Package] = e.Action
				r.pkgTime[e.Package] = e.Elapsed
				if e.Action == "fail" {
					r.failures = append(r.failures, e.Package)
					fmt.Fprintf(out, "FAIL\t%s\t%.1fs\n", e.Package, e.Elapsed)
					if b := outputs[key]; b != nil {
						fmt.Fprint(out, indent(b.String()))
					}
				} else if e.Action == "pass" {
					fmt.Fprintf(out, "ok  \t%s\t%.1fs\n", e.Package, e.Elapsed)
				}
				delete(outputs, key)
				continue
			}
			switch e.Action {
			case "pass":
				r.passed++
			case "fail":
				r.failed++
				r.failures = append(r.failures, e.Package+" "+e.Test)
				fmt.Fprintf(out, "--- FAIL: %s %s (%.2fs)\n%s", e.Package, e.Test, e.Elapsed, indent(text(outputs[key])))
			case "skip":
				r.skipped++
				ok := false
				for _, a := range allow {
					if glob(a.pkg, e.Package) && glob(a.test, e.Test) {
						a.used, ok = true, true
					}
				}
				if !ok {
					r.badSkips = append(r.badSkips, e.Package+" "+e.Test)
				}
				fmt.Fprintf(out, "--- SKIP: %s %s (allowed: %t)\n%s", e.Package, e.Test, ok, indent(text(outputs[key])))
			}
			delete(outputs, key)
		}
	}
	return r, nil
}

// verdict lists why the suite fails, if it does.
func verdict(r *report, allow []*allowed) []string {
	var p []string
	for _, s := range r.badSkips {
		p = append(p, "skipped without an allowlist entry: "+s)
	}
	for _, f := range r.failures {
		p = append(p, "failed: "+f)
	}
	for _, a := range allow {
		if !a.used {
			p = append(p, fmt.Sprintf("allowlist line %d (%s %s) matched no skip: remove it", a.line, a.pkg, a.test))
		}
	}
	if r.passed == 0 {
		p = append(p, "no test passed")
	}
	return p
}

// writeTimes writes every package's time, slowest first, and the total.
func writeTimes(w io.Writer, r *report) {
	pkgs := make([]string, 0, len(r.pkgTime))
	var total float64
	for p, t := range r.pkgTime {
		pkgs = append(pkgs, p)
		total += t
	}
	slices.SortFunc(pkgs, func(a, b string) int {
		if r.pkgTime[a] != r.pkgTime[b] {
			if r.pkgTime[a] > r.pkgTime[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	fmt.Fprintf(w, "package times (seconds, slowest first; %d packages, %.0f s summed):\n", len(pkgs), total)
	for _, p := range pkgs {
		fmt.Fprintf(w, "%8.1f  %-4s  %s\n", r.pkgTime[p], r.pkgResult[p], p)
	}
}

// glob reports whether name matches pattern, where * matches any run of
// characters (slashes included) and everything else matches itself.
func glob(pattern, name string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == name
	}
	if !strings.HasPrefix(name, parts[0]) {
		return false
	}
	name = name[len(parts[0]):]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(name, p)
		if i < 0 {
			return false
		}
		name = name[i+len(p):]
	}
	last := parts[len(parts)-1]
	return len(name) >= len(last) && strings.HasSuffix(name, last)
}

// text returns b's contents ("" for nil).
func text(b *strings.Builder) string {
	if b == nil {
		return ""
	}
	return b.String()
}

func indent(s string) string {
	if s == "" {
		return ""
	}
	lines := strings.SplitAfter(s, "\n")
	var b strings.Builder
	for _, l := range lines {
		if l != "" {
			b.WriteString("    " + l)
		}
	}
	if !strings.HasSuffix(b.String(), "\n") {
		b.WriteString("\n")
	}
	return b.String()
}
