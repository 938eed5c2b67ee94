# geodlq — two commands on a fresh Debian machine:
#   make demo   runs the quickstart on the embedded store
#   make test   vet, the tests of every module (race detector where
#               concurrency lives; no skip outside scripts/skip-allowlist;
#               times per package, docs/testing.md), the CGO_ENABLED=0
#               builds (make nocgo), the import rule, module graph and
#               import cost, go.mod tidiness, make lambda's static zips, and,
#               alongside the tests at the lowest CPU priority,
#               make release-check: every module served at a simulated tag,
#               installed (each adapter with its client pinned at its
#               floor), built and tested with no go.work and no replace
#               (docs/releasing.md)
# Both install what is missing (scripts/deps.sh, scripts/services.sh).
#
# geodlq is several Go modules (the core at the root; each heavy adapter,
# cmd/geodlq and examples in their own), tied together by go.work. The
# package pattern $(PKGS) spans all of them.

GO      ?= go
GOFLAGS ?= -buildvcs=false
# Third-party servers and engines the race detector does not instrument
# (scripts/race-uninstrumented says which and why); in every step, so that
# all of them share one build of those packages.
GOFLAGS += $(foreach p,$(shell sed 's/\#.*//' scripts/race-uninstrumented),-gcflags=$(p)=-race=false)
export GOFLAGS

PKGS := github.com/geodlq/geodlq/...

# STEP prints the step's name and the time it starts (UTC), so that a run
# of make test shows where its time went (docs/testing.md).
STEP = @echo "== $@ starts at $$(date -u +%T)"

CORE := ./classify ./envelope ./offload ./offload/offloadtest ./offload/gcref ./broker ./broker/memory ./broker/brokertest ./replay ./replay/claimstest ./triage ./dlqtest ./ingress

.PHONY: bench-scale all demo test deps test-deps vet race race-and-release-check core-nocgo nocgo lambda importrule release-check bench bench-adapters bench-corpus fuzz fmt tidy tidy-check ui bench-console screenshots

all: test

deps:
	@scripts/deps.sh

test-deps: deps
	$(STEP)
	@scripts/services.sh

demo: deps
	$(GO) run ./examples/quickstart

# nocgo and lambda come before race: their builds are the ones
# cmd/geodlq's TestNoCGOBuild and the examples' empty-root tests make,
# which then come from the build cache.
test: test-deps vet tidy-check nocgo lambda race-and-release-check
	@echo "== make test ends at $$(date -u +%T)"

vet:
	$(STEP)
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) vet $(PKGS)

# Every package's tests (scripts/test.sh): -race except the packages
# scripts/test-plain lists, through internal/testreport (fails on a skip
# scripts/skip-allowlist does not list; prints each package's time).
race:
	$(STEP)
	@scripts/test.sh

core-nocgo:
	CGO_ENABLED=0 $(GO) build $(CORE)

# Issue 22: the core, spatial (checking without GEOS or PROJ), every
# adapter module, every example and cmd/geodlq build with CGO_ENABLED=0;
# spatial's and the registry's tests run in that build too (the verdicts,
# and ErrNeedsCGO for what needs GEOS or PROJ), and spatial/geos's and
# spatial/proj's (their constructors' ErrNeedsCGO). cmd/geodlq's
# TestNoCGOBuild (run by race) runs the binary built so.
NOCGO_MODULES := . broker/jetstream broker/kafka broker/mysql broker/postgis broker/pubsub \
	broker/rabbitmq broker/redisstream broker/servicebus broker/sqlite broker/sqs cmd/geodlq \
	examples offload/blobstore pgmigrate replay/pgclaims replay/redisclaims warehouse
nocgo: core-nocgo
	$(STEP)
	@for m in $(NOCGO_MODULES); do \
	  echo "CGO_ENABLED=0 go build ./... in $$m"; \
	  (cd $$m && CGO_ENABLED=0 $(GO) build ./...) || exit 1; \
	done
	CGO_ENABLED=0 $(GO) test -count=1 ./spatial/... ./internal/epsg

# Issue 22: the Lambda functions as provided.al2023 bootstrap zips, for
# arm64 and x86_64, static (CGO_ENABLED=0: no GEOS, PROJ or proj.db
# needed), each at most 20 MB, in $(LAMBDA_OUT) (gitignored, never
# committed). examples/lambda-sqs-consumer's TestBootstrapInEmptyRoot
# (make test) runs the x86_64 one in an empty root.
LAMBDA_OUT := build/lambda
LAMBDAS    := lambda-sqs-consumer lambda-ingress
lambda:
	$(STEP)
	@mkdir -p $(LAMBDA_OUT)
	@for fn in $(LAMBDAS); do for arch in arm64:arm64 x86_64:amd64; do \
	  dir=$(LAMBDA_OUT)/$$fn-$${arch%%:*}; rm -rf $$dir; mkdir -p $$dir; \
	  (cd examples && CGO_ENABLED=0 GOOS=linux GOARCH=$${arch#*:} $(GO) build -trimpath -ldflags='-s -w' \
	    -tags lambda.norpc -o ../$$dir/bootstrap ./$$fn) || exit 1; \
	  rm -f $$dir.zip; (cd $$dir && zip -q -X ../$$fn-$${arch%%:*}.zip bootstrap) || exit 1; \
	  size=$$(stat -c %s $$dir.zip); echo "$$dir.zip: $$size bytes"; \
	  test $$size -le 20971520 || { echo "$$dir.zip is over 20 MB"; exit 1; }; \
	done; done

# internal/importrule (the import rule, the module graph, the import cost,
# the shared helpers' copies) runs as part of race; this target runs it alone.
importrule:
	$(GO) test -count=1 ./internal/importrule/

bench: deps
	$(GO) test -run '^$$' -bench . -benchmem -count 6 -cpu 1 ./classify ./envelope ./spatial ./ingress ./internal/jsonscan

# Issues 13 and 22's check-path comparison (docs/benchmarks.md), all in
# one run: the corpus generated from npm world-atlas at the lockfile's pin
# (scripts/bench-corpus.sh; never committed), the Python + shapely
# baseline (Debian's python3-shapely), CheckEvent on one core (pure-Go
# and GEOS engines) and on every core, the GEOS and pure-Go floors; the
# same events through go-geos and simplefeatures (internal/enginebench);
# then the whole `geodlq check` process against the baseline's (time and
# peak RSS); then the offload build against crypto/sha256. Feed the Go
# benchmarks' output to benchstat.
bench-corpus: deps
	@command -v npm >/dev/null || scripts/deps.sh npm
	@scripts/deps.sh python3-shapely
	@scripts/bench-corpus.sh >/dev/null
	$(GO) test -run '^$$' -bench 'BenchmarkCorpus' -benchtime 3x -count 6 -timeout 60m ./spatial/geos
	$(GO) test -run '^$$' -bench 'BenchmarkEngines' -benchtime 3x -count 6 -timeout 60m ./internal/enginebench
	$(GO) test -run '^$$' -bench 'BenchmarkCheckEventParallel' -cpu 1,2 -count 6 ./spatial
	@ROUNDS=3 scripts/bench-check.sh
	$(GO) test -run '^$$' -bench 'Offload40MB|SHA256_40MB' -cpu 2 -count 6 ./envelope

# Every dead-letter store's write and replay throughput, and its bare
# client's write (the ceiling), with 2 KiB envelopes against the test
# servers (docs/benchmarks.md). Five rounds, each running every adapter's
# benchmarks once, so that the load of a shared machine falls on SDK and
# bare figures alike; package:benchtime sizes each run to a few seconds.
bench-adapters: test-deps
	@for round in 1 2 3 4 5; do \
	  for p in memory:50000x sqlite:1000x postgis:500x redisstream:5000x jetstream:5000x \
	           rabbitmq:2000x sqs:1000x pubsub:2000x kafka:3000x; do \
	    GEODLQ_REQUIRE_SERVICES=1 $(GO) test -run '^$$' -bench . -benchmem -count 1 \
	      -benchtime $${p#*:} ./broker/$${p%%:*}/ || exit 1; \
	  done; \
	done

# Every fuzz target of every module, FUZZTIME each (go test -fuzz takes
# one target of one package at a time).
FUZZTIME ?= 60s
FUZZ_TARGETS := \
	./broker:FuzzIndexOf \
	./broker/jetstream:FuzzParseURL \
	./broker/jetstream:FuzzSubjectToken \
	./broker/kafka:FuzzCursor \
	./broker/kafka:FuzzSpans \
	./broker/mysql:FuzzHeaders \
	./broker/mysql:FuzzParseURL \
	./broker/pubsub/pubsubpush:FuzzDecode \
	./broker/rabbitmq:FuzzParseURL \
	./broker/rabbitmq:FuzzXDeath \
	./broker/redisstream:FuzzCursor \
	./broker/redisstream:FuzzMessage \
	./broker/sqs/sqslambda:FuzzIngress \
	./cmd/geodlq/internal/console:FuzzDisplay \
	./cmd/geodlq/internal/console:FuzzQuery \
	./envelope:FuzzBuild \
	./envelope:FuzzDecode \
	./envelope:FuzzDecodeFast \
	./envelope:FuzzFromCloudEvent \
	./envelope:FuzzFromCloudEventHTTP \
	./envelope:FuzzFromCloudEventKafka \
	./envelope:FuzzLocateMember \
	./envelope:FuzzWireTime \
	./ingress:FuzzValidate \
	./internal/contracttest:FuzzSchemaAgreesWithDecode \
	./internal/geojson:FuzzCoordinatesMatchEncodingJSON \
	./internal/geojson:FuzzNesting \
	./internal/geojson:FuzzParallelParse \
	./internal/geojson:FuzzParseGeometry \
	./internal/geojson:FuzzReadNumber \
	./internal/geojson:FuzzReadNumberParts \
	./internal/jsonscan:FuzzFind \
	./internal/jsonscan:FuzzUnquote \
	./internal/validity:FuzzEnginesAgree \
	./offload:FuzzFetchRef \
	./offload:FuzzKeyFor \
	./spatial:FuzzCheckEvent \
	./spatial:FuzzCheckEventNesting \
	./spatial:FuzzCheckGeometry \
	./spatial/geos:FuzzEnginesAgree \
	./warehouse:FuzzSyncRow \
	./warehouse:FuzzWriter

fuzz: deps
	@for t in $(FUZZ_TARGETS); do \
	  echo "fuzz: $${t#*:} in $${t%%:*} for $(FUZZTIME)"; \
	  $(GO) test -run '^$$' -fuzz "^$${t#*:}$$" -fuzztime $(FUZZTIME) "$${t%%:*}" || exit 1; \
	done

# The operator console's page (geodlq serve): built from its sources with
# the lockfile's npm packages (esbuild, Leaflet, the Natural Earth basemap
# from world-atlas) into $(UI)/dist, which is committed and embedded. The
# console's TestAssetsMatchFreshBuild, run by make test, fails when dist/
# differs from a fresh build.
UI := cmd/geodlq/internal/console/ui

ui:
	cd $(UI) && npm ci --no-audit --no-fund && node build.mjs dist

# The console's screenshots in docs/img, regenerated from its browser
# test (scripts/screenshots.sh).
screenshots: deps
	scripts/screenshots.sh

# The console on 100,000 records: page load (HTTP and in Chromium), the
# API's p50/p95/p99, and the store's own List and Stats as the baseline
# (the store is made once, in the temporary directory).
bench-console: deps
	$(GO) test -run '^$$' -bench 'BenchmarkConsole|BenchmarkPageLoadBrowser' -benchtime 60x -count 1 ./cmd/geodlq/internal/console/

# Issue 23's scale table (docs/benchmarks.md): fill a SQLite store with
# SCALE_N realistic dead letters (internal/dlqgen through PublishBatch;
# about 35 minutes for 1,000,000 on the shared 2-core machine), then time
# stats, list pages for every filter and sort, the console, warehouse
# sync, verify and, last, a purge of the older half with its blob sweep
# against it with the built binary (cmd/geodlq/internal/scale). Geometries
# over 256 KiB are offloaded to $(SCALE_DIR)/work/blobs as a Processor
# would.
# SCALE_STORE picks another store (postgres://…, mysql://…); an existing
# store at SCALE_STORE is filled further, so point it at a fresh one.
SCALE_N     ?= 1000000
SCALE_DIR   ?= /tmp/geodlq-scale
SCALE_STORE ?= sqlite://$(SCALE_DIR)/dlq.db
SCALE_REPS  ?= 5
bench-scale: deps
	mkdir -p $(SCALE_DIR)/work/blobs
	cd cmd/geodlq && $(GO) build -o $(SCALE_DIR)/geodlq . && \
	  $(GO) build -o $(SCALE_DIR)/dlqfill ./internal/scale/dlqfill && \
	  $(GO) build -o $(SCALE_DIR)/benchscale ./internal/scale/benchscale
	$(SCALE_DIR)/dlqfill -store '$(SCALE_STORE)' -blobs 'file://$(SCALE_DIR)/work/blobs' -n $(SCALE_N)
	$(SCALE_DIR)/benchscale -geodlq $(SCALE_DIR)/geodlq -store '$(SCALE_STORE)' -reps $(SCALE_REPS) -work $(SCALE_DIR)/work -purge

# go.mod files carry no replace directives (so that each module stays
# installable with go install …@version); scripts/gomod.sh tidies them
# against their siblings' directories.
tidy:
	@scripts/gomod.sh tidy

tidy-check:
	$(STEP)
	@scripts/gomod.sh check

# A release tried as a user would before any tag exists (docs/releasing.md):
# scripts/release.sh on a scratch clone, every module served from a
# file:// proxy, the README's install lines (with the clients' floors) and
# every example directory copied whole, with no go.work and no replace.
release-check: deps
	$(STEP)
	@scripts/release-check.sh

# make test runs release-check alongside race, at the lowest CPU priority:
# the race step waits on servers, lease expiries and child processes part
# of the time, and release-check compiles in those gaps (the two share
# only the build and module caches, which the go command locks). Its
# output follows the race step's; either failing fails the target.
race-and-release-check:
	$(STEP)
	@log=$$(mktemp "$${TMPDIR:-/tmp}/geodlq-release-check-log.XXXXXX"); \
	  { echo "== release-check starts at $$(date -u +%T), alongside race"; \
	    nice -n 19 scripts/release-check.sh; rc=$$?; \
	    echo "== release-check ends at $$(date -u +%T)"; exit $$rc; } >"$$log" 2>&1 & rel=$$!; \
	  scripts/test.sh; race=$$?; \
	  wait $$rel; release=$$?; cat "$$log"; rm -f "$$log"; \
	  [ $$race -eq 0 ] && [ $$release -eq 0 ]
