package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// evictPageCache writes the file at path to disk and drops its pages from
// the page cache, so that the next process to map it reads it back as it
// reads an installed binary. A binary the linker has just written sits in
// the page cache in large folios, and a fault on one maps the whole folio:
// geodlq --help peaked at 90 MiB right after the build and at 55 MiB once
// its file was read back from disk (the 35 MiB are the binary's own
// file pages, mapped and counted in RSS, not memory the command uses),
// which put geodlq check's figure for the 40 MB event at 173–177 MiB
// against 140 MiB.
func evictPageCache(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return err
	}
	return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}
