package corpus_test

import (
	"bytes"
	"fmt"

	"github.com/geodlq/geodlq/internal/corpus"
)

// A test drives an entry point with every hostile family and checks the
// verdict each must get.
func ExampleHostile() {
	f, _ := corpus.HostileFamily("trailing_nul_garbage")
	s := f.Generate(corpus.DefaultHostileSize)
	fmt.Println(f.Group, f.Input == corpus.InputEvent, f.Class, f.Kind)
	fmt.Println(bytes.HasSuffix(s.Data, []byte("\x00garbage")))

	deep, _ := corpus.HostileFamily("depth_collections")
	fmt.Println(len(deep.Generate(30<<20).Data) > 29<<20, deep.Class)
	// Output:
	// trailing true schema_violation malformed
	// true
	// true schema_violation
}
