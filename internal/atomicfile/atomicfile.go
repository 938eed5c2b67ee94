// Package atomicfile writes a file so that a reader sees either the old
// file or the whole new one, never a part: the data goes to a temporary
// name in the file's directory, which is then renamed over the file. The
// repository's tools write their outputs with it.
package atomicfile

import (
	"os"
	"path/filepath"
)

// WriteFile writes data to path through a temporary file beside it
// (".tmp-*", mode 0600 as os.CreateTemp makes it), renamed to path once
// written and closed. On any error the temporary file is removed and path
// is left as it was.
func WriteFile(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		os.Remove(f.Name())
		return err
	}
	return nil
}
