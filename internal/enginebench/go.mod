module github.com/geodlq/geodlq/internal/enginebench

go 1.26.0

require (
	github.com/geodlq/geodlq v0.0.0-00010101000000-000000000000
	github.com/peterstace/simplefeatures v0.50.0
	github.com/twpayne/go-geos v0.20.1
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/gabriel-vasile/mimetype v1.4.16 // indirect
	github.com/go-playground/locales v0.14.2 // indirect
	github.com/go-playground/universal-translator v0.18.2 // indirect
	github.com/go-playground/validator/v10 v10.30.6 // indirect
	github.com/leodido/go-urn v1.5.0 // indirect
	github.com/paulmach/orb v0.14.0 // indirect
	github.com/twpayne/go-proj/v11 v11.1.0 // indirect
	go.opentelemetry.io/otel v1.47.0 // indirect
	go.opentelemetry.io/otel/metric v1.47.0 // indirect
	go.opentelemetry.io/otel/trace v1.47.0 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)
