package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// createTemp creates a new temporary file for path in its directory,
// ".NAME.RANDOM.tmp", with mode 0644 less the process's umask: renamed to
// path, it is the file an ordinary create would have made (os.CreateTemp
// makes 0600 files, which other readers of a warehouse or export could
// not open).
func createTemp(path string) (*os.File, error) {
	for range 100 {
		var r [8]byte
		_, _ = rand.Read(r[:])
		name := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+"."+hex.EncodeToString(r[:])+".tmp")
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		return f, err
	}
	return nil, fmt.Errorf("creating a temporary file for %s: %w", path, fs.ErrExist)
}

// writeFileAtomic writes path through write, which fills a temporary file
// in path's directory (its name passed in): the file appears under path,
// complete, only when write succeeds, and an interruption, a full disk or
// an unreachable store leaves whatever path held before untouched.
func writeFileAtomic(path string, write func(tmp string) error) (err error) {
	f, err := createTemp(path)
	if err != nil {
		return err
	}
	tmp := f.Name()
	if err := f.Close(); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	if err := write(tmp); err != nil {
		return err
	}
	if err := syncFile(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

func syncFile(name string) error {
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// createAtomic returns a temporary file in path's directory and a commit
// function that syncs it and renames it to path; abort (always deferred)
// removes it unless it was committed.
func createAtomic(path string) (f *os.File, commit func() error, abort func(), err error) {
	f, err = createTemp(path)
	if err != nil {
		return nil, nil, nil, err
	}
	done := false
	commit = func() error {
		if err := f.Sync(); err != nil {
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		if err := os.Rename(f.Name(), path); err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
		done = true
		return nil
	}
	abort = func() {
		if !done {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}
	return f, commit, abort, nil
}
