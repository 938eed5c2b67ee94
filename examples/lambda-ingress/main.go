// Command lambda-ingress is the seed's pre-flight validation as an AWS
// Lambda function behind Amazon API Gateway, ready to deploy: it checks
// each event with the rules of geodlq's ingress package — the same as its
// net/http middleware — answers a refused one 400 (413 over the byte or
// vertex budget) with an RFC 9457 problem details body, and sends a valid
// one, byte for byte, to the primary SQS queue (202). It serves REST APIs
// (payload format 1.0) and HTTP APIs (2.0); see README.md.
//
// Environment:
//
//	PRIMARY_QUEUE_URL   the queue valid events go to
//	PAYLOAD_FORMAT      "2.0" (HTTP API, default) or "1.0" (REST API)
//
// Everything it uses is public API.
package main

import (
	"context"
	"errors"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/geodlq/geodlq/broker"
	geosqs "github.com/geodlq/geodlq/broker/sqs"
	"github.com/geodlq/geodlq/broker/sqs/sqslambda"
	"github.com/geodlq/geodlq/ingress"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	g, err := newIngress(context.Background(), os.Getenv, log)
	if err != nil {
		log.Error("lambda-ingress: " + err.Error())
		os.Exit(1)
	}
	if os.Getenv("PAYLOAD_FORMAT") == "1.0" {
		lambda.Start(g.HandleV1)
	}
	lambda.Start(g.HandleV2)
}

func newIngress(ctx context.Context, getenv func(string) string, log *slog.Logger) (*sqslambda.Ingress, error) {
	queue := getenv("PRIMARY_QUEUE_URL")
	if queue == "" {
		return nil, errors.New("PRIMARY_QUEUE_URL is required")
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
	// The gate's budget defaults to what the queue accepts (256 KiB less
	// room for attributes), so every event it lets through fits.
	return sqslambda.NewIngress(store, queue, &sqslambda.IngressOptions{Options: ingress.Options{
		SourceURISchemes: []string{"s3", "https"},
		Logger:           log,
	}})
}
