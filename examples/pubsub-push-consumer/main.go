// Command pubsub-push-consumer is a Pub/Sub push endpoint with geodlq's
// dead-letter path, ready to deploy on Cloud Run (or as a Cloud Functions
// 2nd gen function, or behind an Eventarc Pub/Sub trigger): it validates
// each GeoJSON event (geodlq's pure-Go checker: a static binary, see
// Dockerfile), publishes what cannot be
// processed to a dead-letter topic as a dlq.v1 envelope, and answers 204
// only once the handler succeeded or the envelope is durably published —
// otherwise 503, and Pub/Sub delivers the message again. It checks the
// push subscription's OIDC token. See README.md for the subscription
// settings.
//
// Environment:
//
//	PROJECT_ID              the Google Cloud project
//	DLQ_TOPIC_ID            the dead-letter topic (it needs a subscription)
//	PUSH_AUDIENCE           the audience of the push subscription's token (empty: no check)
//	PUSH_SERVICE_ACCOUNT    the push subscription's service account (optional)
//	PORT                    the port to listen on (Cloud Run sets it; default 8080)
//
// Everything it uses is public API.
package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/geodlq/geodlq/broker"
	geopubsub "github.com/geodlq/geodlq/broker/pubsub"
	"github.com/geodlq/geodlq/broker/pubsub/pubsubpush"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/spatial"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv, log); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error("pubsub-push-consumer: " + err.Error())
		os.Exit(1)
	}
}

func run(ctx context.Context, getenv func(string) string, log *slog.Logger) error {
	project, topic := getenv("PROJECT_ID"), getenv("DLQ_TOPIC_ID")
	if project == "" || topic == "" {
		return errors.New("PROJECT_ID and DLQ_TOPIC_ID are required")
	}
	client, err := pubsub.NewClient(ctx, project)
	if err != nil {
		return err
	}
	defer client.Close()
	store, err := geopubsub.New(ctx, client, &geopubsub.Options{StoreOptions: broker.StoreOptions{Logger: log}})
	if err != nil {
		return err
	}
	defer store.Close()
	h, closeFn, err := newHandler(store, topic, getenv("PUSH_AUDIENCE"), getenv("PUSH_SERVICE_ACCOUNT"), log)
	if err != nil {
		return err
	}
	defer closeFn()
	port := getenv("PORT")
	if port == "" {
		port = "8080"
	}
	mux := http.NewServeMux()
	mux.Handle("POST /push", h)
	// Slow clients are cut off: headers within 10s, the whole request
	// (a push body is at most 16 MiB) within 30s, the answer within 2
	// minutes (a push is processed, dead-lettered if need be, then
	// answered), idle keep-alive connections after 2 minutes.
	srv := &http.Server{Addr: ":" + port, Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 2 * time.Minute, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	return srv.ListenAndServe()
}

// newHandler wires the checker, the envelope builder and the push handler.
func newHandler(pub broker.Publisher, topic, audience, serviceAccount string, log *slog.Logger) (http.Handler, func(), error) {
	chk, err := spatial.NewChecker(nil) // expects EPSG:4326
	if err != nil {
		return nil, nil, err
	}
	builder, err := envelope.NewBuilder(&envelope.BuilderOptions{ResolveEPSG: chk.ResolveEPSG})
	if err != nil {
		return nil, nil, err
	}
	opts := pubsubpush.Options{
		Processor: broker.ProcessorOptions{
			Publisher:   pub,
			Builder:     builder,
			Policy:      classify.Policy{MaxAttempts: 4}, // below the subscription's maxDeliveryAttempts (5)
			Destination: func(*broker.Message, classify.Route) string { return topic },
			Logger:      log,
		},
		Consumer: broker.ConsumerOptions{Logger: log},
	}
	if audience != "" {
		opts.Auth = &pubsubpush.Auth{Audience: audience, ServiceAccountEmail: serviceAccount}
	}
	h, err := pubsubpush.New(func(ctx context.Context, m *broker.Message) error {
		// Validate, then do the real work; claim
		// m.Header(broker.HeaderIdempotencyKey) with replay.Once first if
		// it has side effects: Pub/Sub delivers at least once.
		_, err := chk.CheckEventContext(ctx, m.Body)
		return err
	}, &opts)
	if err != nil {
		_ = chk.Close()
		return nil, nil, err
	}
	return h, func() { _ = chk.Close() }, nil
}
