//go:build cgo

package spatial_test

import (
	"errors"
	"fmt"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/spatial"
)

func ExampleChecker_CheckEvent() {
	checker, err := spatial.NewChecker(nil) // expects EPSG:4326
	if err != nil {
		panic(err)
	}
	defer checker.Close()

	// The seed's bowtie: a polygon whose ring crosses itself.
	payload := []byte(`{"event_id":"evt-9","crs":"EPSG:4326",
		"geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}}`)

	res, err := checker.CheckEvent(payload)
	fmt.Printf("%s with %d vertices in EPSG:%d\n", res.GeometryType, res.VertexCount, res.EPSG)

	var ce *classify.Error
	if errors.As(err, &ce) {
		d := ce.Geometry
		fmt.Println("class:   ", ce.Class)
		fmt.Println("stage:   ", ce.Stage)
		fmt.Println("reason:  ", d.Reason)
		fmt.Println("kind:    ", d.Kind)
		fmt.Println("location:", *d.Location)
		fmt.Printf("fault:    ring %d, segment from vertex %d (on segment: %t)\n", d.Fault.Ring, d.Fault.Vertex, d.Fault.OnSegment)
		fmt.Println("goes to: ", classify.RouteFor(ce.Class))
	}

	// RFC 7946's CRS84 passes a 4326 pipeline; Web Mercator does not.
	_, err = checker.CheckEvent([]byte(`{"crs":"urn:ogc:def:crs:OGC:1.3:CRS84","geometry":{"type":"Point","coordinates":[10,50]}}`))
	fmt.Println("CRS84:   ", err)
	_, err = checker.CheckEvent([]byte(`{"crs":"EPSG:3857","geometry":{"type":"Point","coordinates":[1113194.9,6446275.8]}}`))
	fmt.Println("3857:    ", classify.Classify(err), classify.DetailOf(err).EPSG)

	// Output:
	// Polygon with 5 vertices in EPSG:4326
	// class:    invalid_geometry
	// stage:    topology_validation
	// reason:   Self-intersection[0.5 0.5]
	// kind:     self_intersection
	// location: [0.5 0.5]
	// fault:    ring 0, segment from vertex 0 (on segment: true)
	// goes to:  poison
	// CRS84:    <nil>
	// 3857:     crs_mismatch 3857
}
