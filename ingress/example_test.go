package ingress_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/geodlq/geodlq/ingress"
)

func ExampleValidate() {
	event := []byte(`{
		"source_uri": "my-bucket/parcels.geojson",
		"crs": "EPSG:4326",
		"processing_mode": "vector",
		"geometry": {"type": "Polygon", "coordinates": [[[10,10],[20,10],[20,20],[10,20]]]}
	}`)
	for _, v := range ingress.Validate(event, nil) {
		fmt.Println(v.Pointer, v.Class, v.Kind)
		fmt.Println("  ", v.Message)
	}
	// Output:
	// /source_uri schema_violation invalid_uri
	//    source_uri "my-bucket/parcels.geojson" is not an absolute URI (scheme:location, such as s3://bucket/key.geojson)
	// /geometry/coordinates/0/0 invalid_geometry ring_not_closed
	//    Ring is not closed[10 10]
}

func ExampleMiddleware() {
	enqueue := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted) // a valid event: put r.Body on the queue
	})
	gate := ingress.Middleware(enqueue, &ingress.Options{ProcessingModes: []string{"vector", "tiles"}})

	for _, body := range []string{
		`{"source_uri":"s3://b/k.geojson","processing_mode":"tiles","geometry":{"type":"Point","coordinates":[12.5,41.9]}}`,
		`{"source_uri":"s3://b/k.geojson","processing_mode":"raster","geometry":{"type":"Point","coordinates":[12.5,41.9]}}`,
	} {
		rec := httptest.NewRecorder()
		gate.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/events", strings.NewReader(body)))
		fmt.Println(strings.TrimSpace(fmt.Sprint(rec.Code, " ", rec.Header().Get("Content-Type"), " ", rec.Body.String())))
	}
	// Output:
	// 202
	// 400 application/problem+json {"type":"urn:geodlq:problem:invalid-event","title":"Invalid event","status":400,"detail":"The event was not enqueued: processing_mode \"raster\" is not one of: vector, tiles.","instance":"/events","errors":[{"pointer":"/processing_mode","class":"schema_violation","kind":"unknown_processing_mode","message":"processing_mode \"raster\" is not one of: vector, tiles"}]}
}
