//go:build cgo

package geos_test

import (
	"fmt"

	"github.com/geodlq/geodlq/spatial"
	"github.com/geodlq/geodlq/spatial/geos"
)

// Example injects GEOS into a checker: for MakeValid repairs, and, with
// EngineGEOS, as the validity engine (the pure-Go engine, the default,
// gives the same verdicts).
func Example() {
	g, err := geos.New()
	if err != nil {
		fmt.Println(err) // built without cgo: spatial.ErrNeedsCGO
		return
	}
	defer g.Close()
	chk, err := spatial.NewChecker(&spatial.Options{GEOS: g, Engine: spatial.EngineGEOS})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer chk.Close()
	_, err = chk.CheckEvent([]byte(`{"event_id":"evt-bowtie","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}}`))
	fmt.Println(err)
	// Output: invalid geometry: Self-intersection[0.5 0.5]
}
