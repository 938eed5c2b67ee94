package offload_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/geodlq/geodlq/offload"
	"github.com/geodlq/geodlq/offload/offloadtest"
)

// dirHarness tampers behind the store's back: it rewrites the file in
// place, non-atomically, as a disk fault or a careless operator would.
type dirHarness struct {
	dir    string
	stores []*offload.DirStore
}

func (h *dirHarness) MakeStore(context.Context) (offload.Store, error) {
	s, err := offload.NewDirStore(filepath.Join(h.dir, "store"))
	h.stores = append(h.stores, s)
	return s, err
}

func (h *dirHarness) Tamper(_ context.Context, _ offload.Store, key string, mutate func([]byte) []byte) error {
	p := filepath.Join(h.dir, "store", filepath.FromSlash(key))
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	return os.WriteFile(p, mutate(b), 0o640)
}

func (h *dirHarness) Capabilities() offloadtest.Capabilities { return offloadtest.Capabilities{} }

// Path makes the harness an offloadtest.FileHarness.
func (h *dirHarness) Path(_ offload.Store, key string) string {
	return filepath.Join(h.dir, "store", filepath.FromSlash(key))
}

var _ offloadtest.FileHarness = (*dirHarness)(nil)

func (h *dirHarness) Close() {
	for _, s := range h.stores {
		_ = s.Close()
	}
}

func TestDirStoreConformance(t *testing.T) {
	offloadtest.RunConformanceTests(t, func(_ context.Context, t *testing.T) (offloadtest.Harness, error) {
		return &dirHarness{dir: t.TempDir()}, nil
	})
}
