package main

import (
	"fmt"
	"os"
	"path/filepath"
)

// writeFileAtomic writes path through write, which fills a temporary file
// in path's directory (its name passed in): the file appears under path,
// complete, only when write succeeds, and an interruption, a full disk or
// an unreachable store leaves whatever path held before untouched.
func writeFileAtomic(path string, write func(tmp string) error) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
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
	if err := os.Chmod(tmp, 0o644); err != nil {
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
	f, err = os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return nil, nil, nil, err
	}
	done := false
	commit = func() error {
		if err := f.Sync(); err != nil {
			return err
		}
		if err := f.Chmod(0o644); err != nil {
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
