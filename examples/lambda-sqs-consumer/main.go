// Command lambda-sqs-consumer is an AWS Lambda function fed by an SQS event
// source mapping, with geodlq's dead-letter path, ready to deploy: it
// validates each GeoJSON event (geodlq's pure-Go checker: GEOS's verdicts
// without GEOS, EPSG codes without PROJ), dead-letters what
// cannot be processed to an SQS dead-letter queue as a dlq.v1 envelope
// (geometries too large for SQS's 256 KiB offloaded to S3) on its first
// delivery when the failure is deterministic, and reports in
// batchItemFailures exactly the records that must come back: a transient
// failure with receives left, a dead-letter write that failed, a record
// not done before the invocation's deadline. See README.md for the queue,
// mapping and function settings.
//
// Environment:
//
//	DLQ_URL          the dead-letter queue (name or URL) envelopes go to
//	OFFLOAD_BUCKET   an S3 bucket for offloaded geometries (optional)
//	MAX_ATTEMPTS     the retry budget in receives (default 3; keep it below maxReceiveCount)
//	FORWARD_URL      where a valid event goes next, POSTed as is (optional): the
//	                 pipeline's next stage; an answer of 408, 429, 502, 503 or 504,
//	                 a timeout or a refused connection is a transient failure
//	SQS_ENDPOINT     another SQS endpoint (local testing: scripts/local-sqs.sh)
//
// It is pure Go (CGO_ENABLED=0: no GEOS, no PROJ, no proj.db): make lambda
// builds the bootstrap zips, and a test runs one in an empty root.
//
// Everything it uses is public API.
package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/geodlq/geodlq/broker"
	geosqs "github.com/geodlq/geodlq/broker/sqs"
	"github.com/geodlq/geodlq/broker/sqs/sqslambda"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/offload"
	"github.com/geodlq/geodlq/offload/blobstore"
	"github.com/geodlq/geodlq/spatial"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	h, err := newHandler(context.Background(), os.Getenv, log)
	if err != nil {
		log.Error("lambda-sqs-consumer: " + err.Error())
		os.Exit(1)
	}
	lambda.Start(h.HandleSQS)
}

// newHandler wires the store, the envelope builder, the checker and the
// handler once per execution environment (not per invocation).
func newHandler(ctx context.Context, getenv func(string) string, log *slog.Logger) (*sqslambda.Handler, error) {
	dlq := getenv("DLQ_URL")
	if dlq == "" {
		return nil, fmt.Errorf("DLQ_URL is required")
	}
	attempts := 3
	if v := getenv("MAX_ATTEMPTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("MAX_ATTEMPTS %q: want a positive number", v)
		}
		attempts = n
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, err
	}
	if ep := getenv("SQS_ENDPOINT"); ep != "" { // local testing
		cfg.BaseEndpoint = &ep
	}
	store, err := geosqs.New(ctx, awssqs.NewFromConfig(cfg), &geosqs.Options{StoreOptions: broker.StoreOptions{Logger: log}})
	if err != nil {
		return nil, err
	}
	chk, err := spatial.NewChecker(nil) // expects EPSG:4326
	if err != nil {
		return nil, err
	}
	bo := &envelope.BuilderOptions{ResolveEPSG: chk.ResolveEPSG}
	if bucket := getenv("OFFLOAD_BUCKET"); bucket != "" {
		blobs, err := blobstore.Open(ctx, "s3://"+bucket, nil)
		if err != nil {
			return nil, err
		}
		if bo.Offloader, err = offload.New(blobs, nil); err != nil {
			return nil, err
		}
	}
	builder, err := envelope.NewBuilder(bo)
	if err != nil {
		return nil, err
	}
	forward := getenv("FORWARD_URL")
	client := &http.Client{Timeout: 10 * time.Second}
	return sqslambda.New(func(ctx context.Context, m *broker.Message) error {
		// Validate, then do the real work (here: hand the event to the
		// next stage); claim m.Header(broker.HeaderIdempotencyKey) with
		// replay.Once first if that work has side effects: SQS delivers
		// at least once.
		if _, err := chk.CheckEventContext(ctx, m.Body); err != nil {
			return err
		}
		if forward == "" {
			return nil
		}
		return post(ctx, client, forward, m.Body)
	}, &sqslambda.Options{
		Processor: broker.ProcessorOptions{
			Publisher:   store, // the builder keeps envelopes under its 256 KiB
			Builder:     builder,
			Policy:      classify.Policy{MaxAttempts: attempts},
			Destination: func(*broker.Message, classify.Route) string { return dlq },
			Logger:      log,
		},
		Consumer: broker.ConsumerOptions{Logger: log},
	})
}

// statusError is a next stage's answer other than 2xx; classify reads its
// StatusCode (408, 429, 502, 503 and 504 are transient).
type statusError struct{ code int }

func (e statusError) Error() string   { return "next stage answered " + strconv.Itoa(e.code) }
func (e statusError) StatusCode() int { return e.code }

// post sends body to url. A failed connection or a timeout is transient
// to classify, as is a statusError of 408, 429 or 5xx gateway codes.
func post(ctx context.Context, client *http.Client, url string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode/100 != 2 {
		return statusError{resp.StatusCode}
	}
	return nil
}
