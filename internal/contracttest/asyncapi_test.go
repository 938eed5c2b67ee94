package contracttest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
)

const asyncAPIPath = "../../docs/asyncapi.yaml"

// loadYAML reads a YAML file as the JSON value it denotes.
func loadYAML(t *testing.T, path string) any {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var v any
	require.NoError(t, yaml.Unmarshal(b, &v))
	j, err := json.Marshal(v)
	require.NoError(t, err)
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	require.NoError(t, err)
	return doc
}

func compileJSON(t *testing.T, url string, doc any) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	require.NoError(t, c.AddResource(url, doc))
	s, err := c.Compile(url)
	require.NoError(t, err)
	return s
}

// pointer resolves a JSON pointer ("/a/b") in doc.
func pointer(doc any, ptr string) (any, bool) {
	if ptr == "" {
		return doc, true
	}
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		m, ok := doc.(map[string]any)
		if !ok {
			return nil, false
		}
		if doc, ok = m[tok]; !ok {
			return nil, false
		}
	}
	return doc, true
}

// TestAsyncAPIDocument validates docs/asyncapi.yaml against the AsyncAPI
// 3.0.0 schema, resolves every $ref in it, and holds it to the code: the
// channel addresses are broker.DefaultDestination's, the header schemas
// name package broker's headers and accept the headers broker.Headers
// writes for every corpus envelope, and the payload is the dlq.v1 schema.
func TestAsyncAPIDocument(t *testing.T) {
	doc := loadYAML(t, asyncAPIPath)
	spec, err := os.ReadFile("testdata/asyncapi-3.0.0.schema.json")
	require.NoError(t, err)
	specDoc, err := jsonschema.UnmarshalJSON(bytes.NewReader(spec))
	require.NoError(t, err)
	require.NoError(t, compileJSON(t, "https://asyncapi.invalid/3.0.0.json", specDoc).Validate(doc))

	// Every $ref resolves: local pointers in the document, relative ones
	// to a file (and a pointer in it).
	refs := 0
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if ref, ok := v["$ref"].(string); ok {
				refs++
				file, frag, _ := strings.Cut(ref, "#")
				target := doc
				if file != "" {
					b, err := os.ReadFile(filepath.Join(filepath.Dir(asyncAPIPath), file))
					require.NoError(t, err, ref)
					target, err = jsonschema.UnmarshalJSON(bytes.NewReader(b))
					require.NoError(t, err, ref)
				}
				_, ok := pointer(target, frag)
				require.True(t, ok, "$ref %q does not resolve", ref)
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc)
	require.Greater(t, refs, 15)

	// Addresses.
	for _, route := range []classify.Route{classify.RouteRetry, classify.RoutePoison} {
		addr, ok := pointer(doc, "/channels/"+route.String()+"/address")
		require.True(t, ok)
		m := &broker.Message{Source: &envelope.Source{System: "kafka", Topic: "{topic}"}}
		require.Equal(t, broker.DefaultDestination(m, route), addr)
	}

	// The payload is the dlq.v1 schema.
	ref, _ := pointer(doc, "/components/messages/deadLetter/payload/schema/$ref")
	require.Equal(t, "../envelope/dlq.v1.schema.json", ref)
	format, _ := pointer(doc, "/components/messages/deadLetter/payload/schemaFormat")
	require.Equal(t, "application/schema+json;version=draft-2020-12", format)

	// Header names are broker's; the dead-letter header schema accepts
	// what broker.Headers writes.
	dlHeaders, _ := pointer(doc, "/components/schemas/deadLetterHeaders")
	props, _ := pointer(dlHeaders, "/properties")
	require.ElementsMatch(t, []string{broker.HeaderSchema, broker.HeaderClass, broker.HeaderStage, broker.HeaderRoute,
		broker.HeaderEventID, broker.HeaderIdempotencyKey, broker.HeaderEPSG}, keys(props))
	replayHeaders, _ := pointer(doc, "/components/schemas/replayHeaders/properties")
	require.ElementsMatch(t, []string{broker.HeaderIdempotencyKey, broker.HeaderEventID, broker.HeaderFirstSeenAt,
		broker.HeaderReplayOf, broker.HeaderRepaired, broker.HeaderRepair}, keys(replayHeaders))
	headerSchema := compileJSON(t, "https://asyncapi.invalid/deadLetterHeaders.json", dlHeaders)
	withEPSG := 0
	for _, d := range builtCorpus(t, false) {
		env, err := envelope.Decode(d.data)
		require.NoError(t, err)
		h := map[string]any{}
		for k, v := range broker.Headers(env) {
			h[k] = v
		}
		if _, ok := h[broker.HeaderEPSG]; ok {
			withEPSG++
		}
		require.NoError(t, headerSchema.Validate(h), d.name)
	}
	require.Positive(t, withEPSG)
	require.Error(t, headerSchema.Validate(map[string]any{broker.HeaderSchema: "dlq.v2"}))

	checkCloudEventMessages(t, doc)
}

// checkCloudEventMessages holds the CloudEvents messages to the binding:
// their header schemas name every attribute ToCloudEventKafka and
// ToCloudEventHTTP write and accept those headers for every corpus
// envelope, and the structured schema accepts ToCloudEvent's events.
func checkCloudEventMessages(t *testing.T, doc any) {
	t.Helper()
	dlq, err := os.ReadFile("../../envelope/dlq.v1.schema.json")
	require.NoError(t, err)
	dlqDoc, err := jsonschema.UnmarshalJSON(bytes.NewReader(dlq))
	require.NoError(t, err)
	compile := func(ptr string) *jsonschema.Schema {
		t.Helper()
		v, ok := pointer(doc, ptr)
		require.True(t, ok, ptr)
		c := jsonschema.NewCompiler()
		require.NoError(t, c.AddResource("https://asyncapi.invalid/envelope/dlq.v1.schema.json", dlqDoc))
		require.NoError(t, c.AddResource("https://asyncapi.invalid/docs/x.json", v))
		s, err := c.Compile("https://asyncapi.invalid/docs/x.json")
		require.NoError(t, err)
		return s
	}
	for _, m := range []string{"deadLetterCloudEvent", "deadLetterCloudEventKafka", "deadLetterCloudEventHTTP"} {
		for _, ch := range []string{"retry", "poison"} {
			_, ok := pointer(doc, "/channels/"+ch+"/messages/"+m)
			require.True(t, ok, "channel %s lists %s", ch, m)
		}
	}
	kafka, http, structured := compile("/components/schemas/cloudEventKafkaHeaders"), compile("/components/schemas/cloudEventHTTPHeaders"),
		compile("/components/schemas/cloudEvent")
	kprops, _ := pointer(doc, "/components/schemas/cloudEventKafkaHeaders/properties")
	hprops, _ := pointer(doc, "/components/schemas/cloudEventHTTPHeaders/properties")
	for _, d := range builtCorpus(t, false) {
		env, err := envelope.Decode(d.data)
		require.NoError(t, err)
		kh, _, err := envelope.ToCloudEventKafka(env, nil)
		require.NoError(t, err)
		hk := map[string]any{}
		for _, h := range kh {
			hk[h.Key] = string(h.Value)
		}
		require.Subset(t, keys(kprops), keys(hk), "every Kafka header is described")
		require.NoError(t, kafka.Validate(hk), d.name)

		hh := map[string][]string{}
		_, err = envelope.ToCloudEventHTTP(env, hh, nil)
		require.NoError(t, err)
		hl := map[string]any{}
		for k, v := range hh {
			hl[strings.ToLower(k)] = v[0]
		}
		require.Subset(t, keys(hprops), keys(hl), "every HTTP header is described")
		require.NoError(t, http.Validate(hl), d.name)

		for _, opts := range []*envelope.CloudEventOptions{nil, {JSONData: true}} {
			ce, err := envelope.ToCloudEvent(env, opts)
			require.NoError(t, err)
			v, err := jsonschema.UnmarshalJSON(bytes.NewReader(ce))
			require.NoError(t, err)
			require.NoError(t, structured.Validate(v), d.name)
		}
	}
	require.Error(t, kafka.Validate(map[string]any{"ce_specversion": "1.0", "ce_id": "1", "ce_source": "/", "ce_type": "x", "content-type": "text/plain"}))
}

func keys(v any) []string {
	m, _ := v.(map[string]any)
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
