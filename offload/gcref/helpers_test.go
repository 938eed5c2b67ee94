package gcref_test

import "os"

// tempDir makes a directory for an example, which removes it.
func tempDir() string {
	d, err := os.MkdirTemp("", "gcref-example")
	if err != nil {
		panic(err)
	}
	return d
}
