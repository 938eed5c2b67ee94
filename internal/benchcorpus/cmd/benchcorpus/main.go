// Command benchcorpus writes the check-path benchmark corpus (package
// internal/benchcorpus) from an installed world-atlas package. It is run
// by scripts/bench-corpus.sh, which installs world-atlas first:
//
//	benchcorpus -atlas node_modules/world-atlas -o corpus.jsonl
//
// The file is written to a temporary name and renamed, and a summary is
// printed on standard error. GEOS (package spatial) leaves the invalid
// polygons out of the large event.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/internal/benchcorpus"
	"github.com/geodlq/geodlq/spatial"
)

func main() {
	atlas := flag.String("atlas", "", "the world-atlas package directory (holding countries-10m.json)")
	out := flag.String("o", "", "the corpus file to write")
	flag.Parse()
	if *atlas == "" || *out == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*atlas, *out); err != nil {
		fmt.Fprintln(os.Stderr, "benchcorpus:", err)
		os.Exit(1)
	}
}

func run(atlas, out string) error {
	tmp, err := os.CreateTemp(filepath.Dir(out), filepath.Base(out)+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	c, err := spatial.NewChecker(&spatial.Options{MaxBytes: -1, MaxVertices: -1, MaxParts: -1})
	if err != nil {
		return err
	}
	defer c.Close()
	check := func(geometry []byte) (int, bool) {
		err := c.CheckGeometry(geometry)
		if err == nil {
			return 0, true
		}
		if d := classify.DetailOf(err); d != nil && d.Fault != nil {
			return d.Fault.Part, false
		}
		return -1, false
	}
	st, err := benchcorpus.Generate(atlas, tmp, check)
	if err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "benchcorpus %s: %d events, %.1f MB, %d positions, largest %.1f MB (%d positions, %d invalid polygons left out), %v\n",
		benchcorpus.Version, st.Events, float64(st.Bytes)/1e6, st.Vertices, float64(st.Largest)/1e6, st.LargestVertices, st.LargeDropped, st.ByVariant)
	return nil
}
