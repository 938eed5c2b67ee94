package contracttest

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/envelope"
)

// TestCloudEventsSDKReadsTheBinding checks envelope.ToCloudEvent against
// the CloudEvents Go SDK: the SDK parses every dead letter of the corpora,
// validates it against the specification, and sees the envelope as its
// data byte for byte and the dead-letter fields as extensions; an event
// the SDK writes reads back with envelope.FromCloudEvent.
func TestCloudEventsSDKReadsTheBinding(t *testing.T) {
	built := builtCorpus(t, false)
	total, compacted, unreadable := len(built), 0, 0
	for _, d := range built {
		env, err := envelope.Decode(d.data)
		require.NoError(t, err, d.name)
		ce, err := envelope.ToCloudEvent(env, nil)
		require.NoError(t, err, d.name)

		var ev event.Event
		if err := json.Unmarshal(ce, &ev); err != nil {
			// The SDK's JSON parser (json-iterator) refuses some valid
			// JSON numbers in data (1E+2); the payload of seed 07 has
			// them. Such an event reads as data_base64, below.
			require.True(t, strings.HasSuffix(d.name, "/seed/07"), "%s: the SDK cannot read it: %v", d.name, err)
			unreadable++
		} else {
			checkSDKEvent(t, d, env, ev)
			// What the SDK writes back (its own member order and encoding
			// of the attributes) reads back. The SDK compacts JSON data as
			// it writes it: an envelope whose payload has insignificant
			// whitespace is then refused as invalid, never misread; with
			// Base64Data it goes through untouched.
			out, err := json.Marshal(ev)
			require.NoError(t, err)
			back, err := envelope.FromCloudEvent(out)
			if err != nil {
				require.ErrorIs(t, err, envelope.ErrInvalid, d.name)
				var written map[string]json.RawMessage
				require.NoError(t, json.Unmarshal(out, &written))
				require.NotEqual(t, string(d.data), string(written["data"]), "%s: refused though the SDK kept the data", d.name)
				compacted++
			} else {
				again, err := back.Encode()
				require.NoError(t, err)
				require.Equal(t, string(d.data), string(again), d.name)
			}
		}

		ce, err = envelope.ToCloudEvent(env, &envelope.CloudEventOptions{Base64Data: true})
		require.NoError(t, err)
		var ev64 event.Event
		require.NoError(t, json.Unmarshal(ce, &ev64), d.name)
		checkSDKEvent(t, d, env, ev64)
		out, err := json.Marshal(ev64)
		require.NoError(t, err)
		back, err := envelope.FromCloudEvent(out)
		require.NoError(t, err, d.name)
		again, err := back.Encode()
		require.NoError(t, err)
		require.Equal(t, string(d.data), string(again), d.name)
	}
	t.Logf("%d envelopes through the SDK; %d it could not parse as JSON data, %d refused after it compacted their JSON data; all intact as data_base64",
		total, unreadable, compacted)
}

// checkSDKEvent checks what the SDK read of a dead-letter event.
func checkSDKEvent(t *testing.T, d document, env *envelope.Envelope, ev event.Event) {
	t.Helper()
	require.NoError(t, ev.Validate(), d.name)
	require.Equal(t, "1.0", ev.SpecVersion())
	require.Equal(t, envelope.CloudEventType, ev.Type())
	require.Equal(t, env.EventID, ev.Subject())
	require.True(t, env.DeadLetteredAt.Equal(ev.Time()))
	require.Equal(t, envelope.SchemaID, ev.DataSchema())
	require.Equal(t, "application/json", ev.DataContentType())
	require.Equal(t, string(d.data), string(ev.Data()), "%s: the SDK holds the envelope verbatim", d.name)
	ext := ev.Extensions()
	require.Equal(t, env.FailureClass.String(), ext[envelope.ExtClass])
	require.Equal(t, env.FailedStage.String(), ext[envelope.ExtStage])
	require.Equal(t, env.Route.String(), ext[envelope.ExtDestination])
	require.Equal(t, env.IdempotencyKey, ext[envelope.ExtIdempotencyKey])
	require.EqualValues(t, env.Attempts, ext[envelope.ExtAttempts])
	require.Equal(t, env.PayloadSHA256, ext[envelope.ExtPayloadSHA256])
}

// TestCloudEventFromSDK builds a dead-letter event with the SDK's own API,
// as a producer in another service would, and reads it.
func TestCloudEventFromSDK(t *testing.T) {
	built := builtCorpus(t, false)
	env, err := envelope.Decode(built[0].data)
	require.NoError(t, err)
	ev := event.New()
	ev.SetID("a-1")
	ev.SetSource("//pipeline.example/parcels")
	ev.SetType(envelope.CloudEventType)
	ev.SetTime(time.Now())
	ev.SetExtension(envelope.ExtClass, env.FailureClass.String())
	ev.SetExtension(envelope.ExtAttempts, env.Attempts)
	ev.SetExtension("comexampletenant", "eu-1")
	require.NoError(t, ev.SetData(event.ApplicationJSON, json.RawMessage(built[0].data)))
	require.NoError(t, ev.Validate())
	out, err := json.Marshal(ev)
	require.NoError(t, err)
	back, err := envelope.FromCloudEvent(out)
	require.NoError(t, err, string(out))
	require.Equal(t, env.IdempotencyKey, back.IdempotencyKey)

	// The SDK's binary mode form (data_base64, as for non-JSON data).
	ev.SetDataContentType("application/json")
	ev.DataEncoded = nil
	ev.DataBase64 = true
	ev.DataEncoded = built[0].data
	out, err = json.Marshal(ev)
	require.NoError(t, err)
	require.Contains(t, string(out), `"data_base64"`)
	back, err = envelope.FromCloudEvent(out)
	require.NoError(t, err, string(out))
	require.Equal(t, env.EventID, back.EventID)

	ev.SetExtension(envelope.ExtClass, "resource_exhausted")
	require.NotEqual(t, "resource_exhausted", env.FailureClass.String())
	out, err = json.Marshal(ev)
	require.NoError(t, err)
	_, err = envelope.FromCloudEvent(out)
	require.ErrorIs(t, err, envelope.ErrCloudEvent)
}
