module github.com/geodlq/geodlq/internal/enginebench

go 1.25.0

require (
	github.com/geodlq/geodlq v0.0.0-00010101000000-000000000000
	github.com/peterstace/simplefeatures v0.50.0
	github.com/twpayne/go-geos v0.20.1
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/paulmach/orb v0.14.0 // indirect
	go.opentelemetry.io/otel v1.46.0 // indirect
	go.opentelemetry.io/otel/metric v1.46.0 // indirect
	go.opentelemetry.io/otel/trace v1.46.0 // indirect
)
