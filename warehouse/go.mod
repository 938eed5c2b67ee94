module github.com/geodlq/geodlq/warehouse

go 1.25.0

require (
	github.com/geodlq/geodlq v0.0.0-00010101000000-000000000000
	github.com/parquet-go/parquet-go v0.25.1
	github.com/paulmach/orb v0.14.0
	github.com/stretchr/testify v1.12.1
)

require (
	github.com/alecthomas/assert/v2 v2.11.0 // indirect
	github.com/andybalholm/brotli v1.1.0 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/klauspost/compress v1.17.9 // indirect
	github.com/pierrec/lz4/v4 v4.1.21 // indirect
	github.com/twpayne/go-proj/v11 v11.1.0 // indirect
	go.opentelemetry.io/otel v1.46.0 // indirect
	go.opentelemetry.io/otel/metric v1.46.0 // indirect
	go.opentelemetry.io/otel/trace v1.46.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.47.0 // indirect
)
