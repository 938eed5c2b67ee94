package sqslambda_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/broker/sqs/sqslambda"
	"github.com/geodlq/geodlq/ingress"
)

// FuzzIngress: any body, raw or claimed base64, is answered 202, 400, 413
// or 405 — never a panic, never another status.
func FuzzIngress(f *testing.F) {
	f.Add(`{"source_uri":"s3://b/k","processing_mode":"vector","geometry":{"type":"Point","coordinates":[1,2]}}`, false, "POST")
	f.Add(`eyJhIjoxfQ==`, true, "POST")
	f.Add(`=====`, true, "PUT")
	f.Add(`{"geometry":{"type":"GeometryCollection","geometries":[[[[[[[[`, false, "POST")
	f.Add("\x00", false, "DELETE")
	g, err := sqslambda.NewIngress(memory.New(nil), "events", &sqslambda.IngressOptions{Options: ingress.Options{MaxBytes: 64 << 10}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body string, b64 bool, method string) {
		r, err := g.HandleV1(context.Background(), events.APIGatewayProxyRequest{HTTPMethod: method, Path: "/e", Body: body, IsBase64Encoded: b64})
		if err != nil {
			t.Fatal(err)
		}
		switch r.StatusCode {
		case http.StatusAccepted, http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusMethodNotAllowed:
		default:
			t.Fatalf("status %d: %s", r.StatusCode, r.Body)
		}
	})
}
