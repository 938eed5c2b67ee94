// Command binsize says what each part of a Go binary costs, for
// docs/binary-size.md: it reads the symbol table of an unstripped binary
// (go tool nm -size) and the modules it was built from (its build
// information), and prints a Markdown table of bytes per module — the
// standard library, cgo's C code and each dependency, its packages listed
// beside it — largest first. Symbols of no package (the pcln tables, type
// and string data the linker names go:…, type:…) are one row.
//
//	go run ./internal/binsize [-top N] BINARY
package main

import (
	"bufio"
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

func main() {
	top := flag.Int("top", 25, "modules listed; the rest are summed in one row")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: binsize [-top N] BINARY")
		os.Exit(2)
	}
	if err := run(os.Stdout, flag.Arg(0), *top); err != nil {
		fmt.Fprintln(os.Stderr, "binsize:", err)
		os.Exit(1)
	}
}

func run(w io.Writer, bin string, top int) error {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return err
	}
	var deps []string
	for _, d := range info.Deps {
		deps = append(deps, d.Path)
	}
	deps = append(deps, info.Main.Path)
	slices.SortStableFunc(deps, func(a, b string) int { return len(b) - len(a) })
	mods := append([]string{info.Main.Path}, deps...)
	nm := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "tool", "nm", "-size", bin)
	var stderr bytes.Buffer
	nm.Stderr = &stderr
	out, err := nm.Output()
	if err != nil {
		return fmt.Errorf("go tool nm: %w: %s", err, stderr.String())
	}
	// Zeroed memory (.bss, .noptrbss) takes no room in the file, whatever
	// type letter nm gives its symbols.
	var nobits [][2]uint64
	if f, err := elf.Open(bin); err == nil {
		for _, sec := range f.Sections {
			if sec.Type == elf.SHT_NOBITS {
				nobits = append(nobits, [2]uint64{sec.Addr, sec.Addr + sec.Size})
			}
		}
		f.Close()
	}
	inFile := func(addr uint64) bool {
		for _, r := range nobits {
			if addr >= r[0] && addr < r[1] {
				return false
			}
		}
		return true
	}
	sizes, pkgs, total, err := attribute(bytes.NewReader(out), mods, inFile)
	if err != nil {
		return err
	}
	fi, err := os.Stat(bin)
	if err != nil {
		return err
	}
	writeTable(w, sizes, pkgs, total, fi.Size(), top)
	if f, err := elf.Open(bin); err == nil {
		defer f.Close()
		writeSections(w, f)
	}
	return nil
}

// writeSections lists the file's allocated sections and debug sections,
// largest first: symbols above cover code and data; the pcln tables
// (.gopclntab, function metadata the runtime needs for stacks and
// garbage collection) and read-only data grow with the code.
func writeSections(w io.Writer, f *elf.File) {
	type sec struct {
		name string
		size uint64
	}
	var secs []sec
	for _, s := range f.Sections {
		if s.Size > 0 && s.Type != elf.SHT_NOBITS && (s.Flags&elf.SHF_ALLOC != 0 || strings.HasPrefix(s.Name, ".debug") || strings.HasPrefix(s.Name, ".zdebug") || s.Name == ".symtab" || s.Name == ".strtab") {
			secs = append(secs, sec{s.Name, s.Size})
		}
	}
	slices.SortFunc(secs, func(a, b sec) int {
		if a.size > b.size {
			return -1
		} else if a.size < b.size {
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	fmt.Fprintln(w, "\n| section | MB | kept when stripped |")
	fmt.Fprintln(w, "| --- | ---: | --- |")
	for _, s := range secs {
		if s.size < 64<<10 {
			continue
		}
		kept := "yes"
		if strings.Contains(s.name, "debug") || s.name == ".symtab" || s.name == ".strtab" {
			kept = "no"
		}
		fmt.Fprintf(w, "| %s | %.2f | %s |\n", s.name, mb(int64(s.size)), kept)
	}
}

// attribute sums symbol sizes by module (longest module path first in
// mods), returning bytes per module, bytes per package, and the total.
func attribute(r io.Reader, mods []string, inFile func(addr uint64) bool) (map[string]int64, map[string]map[string]int64, int64, error) {
	sizes := map[string]int64{}
	pkgs := map[string]map[string]int64{}
	var total int64
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 {
			continue // undefined symbols have no address or size
		}
		size, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		if f[2] == "U" || f[2] == "B" || f[2] == "b" {
			continue // undefined, or zeroed memory (BSS) that takes no room in the file
		}
		if addr, err := strconv.ParseUint(f[0], 16, 64); err == nil && !inFile(addr) {
			continue
		}
		name := strings.Join(f[3:], " ")
		pkg := packageOf(name)
		mod := moduleOf(pkg, mods)
		sizes[mod] += size
		if pkgs[mod] == nil {
			pkgs[mod] = map[string]int64{}
		}
		pkgs[mod][pkg] += size
		total += size
	}
	return sizes, pkgs, total, sc.Err()
}

// packageOf returns the import path of the package a symbol belongs to,
// or a bracketed category.
func packageOf(sym string) string {
	switch {
	case strings.HasPrefix(sym, "go:") || strings.HasPrefix(sym, "go.shape.") || strings.HasPrefix(sym, "type:") || strings.HasPrefix(sym, "runtime.pclntab") ||
		strings.HasPrefix(sym, "runtime.text") || strings.HasPrefix(sym, "runtime.etext"):
		return "[linker data: pcln tables, types, strings]"
	case strings.HasPrefix(sym, "_cgo_") || strings.HasPrefix(sym, "x_cgo_") || !strings.Contains(sym, "."):
		return "[C: cgo and the C shims]"
	}
	// A package path may hold dots (github.com/…): the package ends at the
	// first dot after the last slash.
	s, _, _ := strings.Cut(sym, "[") // type arguments hold paths too
	for _, p := range []string{"*", "("} {
		s = strings.TrimPrefix(s, p)
	}
	slash := strings.LastIndex(s, "/")
	dot := strings.Index(s[slash+1:], ".")
	if dot < 0 {
		return "[C: cgo and the C shims]"
	}
	return s[:slash+1+dot]
}

// moduleOf returns the module holding pkg: one of mods (the first is the
// main module, which holds package main), "std" for the standard library,
// or pkg itself for a bracketed category.
func moduleOf(pkg string, mods []string) string {
	if strings.HasPrefix(pkg, "[") {
		return pkg
	}
	if pkg == "main" && len(mods) > 0 {
		return mods[0]
	}
	for _, m := range mods {
		if pkg == m || strings.HasPrefix(pkg, m+"/") {
			return m
		}
	}
	first, _, _ := strings.Cut(pkg, "/")
	if !strings.Contains(first, ".") {
		return "std"
	}
	return "[other: " + first + "]"
}

func writeTable(w io.Writer, sizes map[string]int64, pkgs map[string]map[string]int64, total, file int64, top int) {
	mods := make([]string, 0, len(sizes))
	for m := range sizes {
		mods = append(mods, m)
	}
	slices.SortFunc(mods, func(a, b string) int {
		if sizes[a] != sizes[b] {
			if sizes[a] > sizes[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	fmt.Fprintf(w, "Symbols: %.1f MB of a %.1f MB file.\n\n", mb(total), mb(file))
	fmt.Fprintln(w, "| module | MB | share | largest packages (MB) |")
	fmt.Fprintln(w, "| --- | ---: | ---: | --- |")
	var rest int64
	var restN int
	for i, m := range mods {
		if i >= top {
			rest += sizes[m]
			restN++
			continue
		}
		fmt.Fprintf(w, "| %s | %.2f | %.1f%% | %s |\n", m, mb(sizes[m]), 100*float64(sizes[m])/float64(total), largest(pkgs[m], m, 3))
	}
	if restN > 0 {
		fmt.Fprintf(w, "| %d other modules | %.2f | %.1f%% | |\n", restN, mb(rest), 100*float64(rest)/float64(total))
	}
}

// largest lists the n largest packages of a module, paths relative to it.
func largest(p map[string]int64, mod string, n int) string {
	if strings.HasPrefix(mod, "[") {
		return ""
	}
	names := make([]string, 0, len(p))
	for k := range p {
		names = append(names, k)
	}
	slices.SortFunc(names, func(a, b string) int {
		if p[a] > p[b] {
			return -1
		} else if p[a] < p[b] {
			return 1
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, k := range names[:min(n, len(names))] {
		rel := strings.TrimPrefix(strings.TrimPrefix(k, mod), "/")
		if rel == "" {
			rel = "."
		}
		parts = append(parts, fmt.Sprintf("%s %.2f", rel, mb(p[k])))
	}
	return strings.Join(parts, ", ")
}

func mb(n int64) float64 { return float64(n) / (1 << 20) }
