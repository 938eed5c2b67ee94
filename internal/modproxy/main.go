// Command modproxy lays out a Go module proxy in a directory — as a tag of
// this repository would be served — for make release-check
// (scripts/release-check.sh): it zips every module of the repository at a
// git revision with golang.org/x/mod/zip, the code the go command itself
// uses, and writes each one's @v/list, .info, .mod and .zip under the
// module's escaped path, so that GOPROXY=file://DIR serves them.
//
//	go run ./internal/modproxy -version v0.1.0 -out DIR [-rev HEAD] [-repo .] MODULE_DIR…
//
// MODULE_DIR is a module's directory relative to the repository ("." for
// the root). Only committed files at -rev go into a zip, as with a tag.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/zip"

	"github.com/geodlq/geodlq/internal/atomicfile"
)

func main() {
	version := flag.String("version", "", "the version to serve every module at (required), e.g. v0.1.0")
	out := flag.String("out", "", "the proxy directory to write (required)")
	rev := flag.String("rev", "HEAD", "the git revision to zip")
	repo := flag.String("repo", ".", "the repository's root")
	flag.Parse()
	if err := run(*repo, *rev, *version, *out, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "modproxy:", err)
		os.Exit(1)
	}
}

func run(repo, rev, version, out string, dirs []string) error {
	if version == "" || out == "" || len(dirs) == 0 {
		return errors.New("usage: modproxy -version vX.Y.Z -out DIR [-rev REV] [-repo DIR] MODULE_DIR…")
	}
	if !semver.IsValid(version) || semver.Canonical(version) != version {
		return fmt.Errorf("version %q is not a canonical semantic version", version)
	}
	repo, err := filepath.Abs(repo)
	if err != nil {
		return err
	}
	when, err := commitTime(repo, rev)
	if err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, when})
	if err != nil {
		return err
	}
	for _, d := range dirs {
		d = path.Clean(filepath.ToSlash(d))
		if d == "." {
			d = ""
		}
		gomod, err := gitShow(repo, rev, path.Join(d, "go.mod"))
		if err != nil {
			return err
		}
		mf, err := modfile.ParseLax("go.mod", gomod, nil)
		if err != nil || mf.Module == nil {
			return fmt.Errorf("%s/go.mod at %s: no module directive (%v)", d, rev, err)
		}
		m := module.Version{Path: mf.Module.Mod.Path, Version: version}
		if err := module.Check(m.Path, m.Version); err != nil {
			return err
		}
		esc, err := module.EscapePath(m.Path)
		if err != nil {
			return err
		}
		dir := filepath.Join(out, filepath.FromSlash(esc), "@v")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		var z bytes.Buffer
		if err := zip.CreateFromVCS(&z, m, repo, rev, d); err != nil {
			return fmt.Errorf("zipping %s: %w", m.Path, err)
		}
		for name, b := range map[string][]byte{
			version + ".zip":  z.Bytes(),
			version + ".mod":  gomod,
			version + ".info": info,
			"list":            []byte(version + "\n"),
		} {
			if err := atomicfile.WriteFile(filepath.Join(dir, name), b); err != nil {
				return err
			}
		}
		fmt.Printf("%s %s (%d bytes)\n", m.Path, version, z.Len())
	}
	return nil
}

func gitShow(repo, rev, file string) ([]byte, error) {
	cmd := exec.Command("git", "-C", repo, "show", rev+":"+file)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git show %s:%s: %w: %s", rev, file, err, strings.TrimSpace(stderr.String()))
	}
	return b, nil
}

func commitTime(repo, rev string) (time.Time, error) {
	b, err := exec.Command("git", "-C", repo, "log", "-1", "--format=%cI", rev).Output()
	if err != nil {
		return time.Time{}, fmt.Errorf("git log %s: %w", rev, err)
	}
	return time.Parse(time.RFC3339, strings.TrimSpace(string(b)))
}
