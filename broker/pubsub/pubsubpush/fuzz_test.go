package pubsubpush

import (
	"net/http"
	"testing"
)

// FuzzDecode: any body, with or without CloudEvent headers, decodes to a
// message or a plain error — never a panic — and a decoded message has its
// data and id from the body.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"message":{"data":"eyJhIjoxfQ==","messageId":"m-1","publishTime":"2026-12-03T10:00:00Z","attributes":{"k":"v"}},"subscription":"projects/p/subscriptions/s","deliveryAttempt":3}`), false)
	f.Add([]byte(`{"specversion":"1.0","type":"google.cloud.pubsub.topic.v1.messagePublished","data":{"message":{"data":"","message_id":"x"}}}`), true)
	f.Add([]byte(`{"message":null}`), false)
	f.Add([]byte(`{"message":{"data":"!!!"}}`), false)
	f.Add([]byte(`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[`), true)
	f.Add([]byte("\x00\xff"), false)
	f.Fuzz(func(t *testing.T, body []byte, structured bool) {
		h := http.Header{}
		if structured {
			h.Set("Content-Type", "application/cloudevents+json")
		} else {
			h.Set("Ce-Source", "//pubsub.googleapis.com/projects/p/topics/t")
		}
		m, _, err := decode(h, body)
		if err != nil {
			if m != nil {
				t.Fatal("a message with an error")
			}
			return
		}
		if m == nil {
			t.Fatal("no message and no error")
		}
	})
}
