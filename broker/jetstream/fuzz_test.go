package jetstream_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/jetstream"
)

// FuzzSubjectToken: every destination maps to one subject token without
// dots, wildcards or whitespace, and back; a token the store did not make
// (a subject someone else published under the prefix) is refused or
// decodes to the destination whose token it is, never panics.
func FuzzSubjectToken(f *testing.F) {
	for _, s := range []string{"orders.poison.dlt", "a_b", "_2E", "wild.*.>", "café", "", "\x00\xff", "_", "_4", "_zz", strings.Repeat("x.", 200)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok := jetstream.SubjectToken(s)
		if strings.ContainsAny(tok, ".*> \t\r\n") {
			t.Fatalf("token %q of %q is not one literal subject token", tok, s)
		}
		back, err := jetstream.DestinationOfToken(tok)
		if err != nil || back != s {
			t.Fatalf("DestinationOfToken(SubjectToken(%q)) = %q, %v", s, back, err)
		}
		if d, err := jetstream.DestinationOfToken(s); err == nil && jetstream.SubjectToken(d) != s {
			t.Fatalf("%q decodes to %q, whose token is %q", s, d, jetstream.SubjectToken(d))
		}
	})
}

// FuzzParseURL: the opener's URL parser never panics and refuses with
// broker.ErrInvalidArgument.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"nats://host", "nats://u:p@[::1]:4222?geodlq_stream=S&lease_ttl=1s", "nats:///x", "nats://h?max_message_bytes=-1",
		"nats://h?%zz", "nats://ro ot@h", "nats://h:99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := broker.ParseStoreURL(raw)
		if err != nil {
			return
		}
		_, _, err = jetstream.ParseURL(u, broker.OpenOptions{})
		if err != nil && !errors.Is(err, broker.ErrInvalidArgument) {
			t.Fatalf("ParseURL(%q): untyped error %v", raw, err)
		}
	})
}
