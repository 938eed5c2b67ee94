package contracttest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"slices"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/envelope"
)

func compileSchema(t testing.TB) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(envelope.Schema()))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	require.NoError(t, c.AddResource(envelope.SchemaID, doc))
	sch, err := c.Compile(envelope.SchemaID)
	require.NoError(t, err)
	return sch
}

// schemaCheck validates a document against the schema: nil when valid.
// A document that is not JSON text is not valid.
func schemaCheck(sch *jsonschema.Schema, data []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return err
	}
	return sch.Validate(v)
}

// verdict is what an enforcer said of a document.
type verdict string

const (
	accepted      verdict = "ok"
	invalid       verdict = "invalid"
	badVersion    verdict = "version"
	unknownResult verdict = "?"
)

func decodeVerdict(data []byte) (verdict, *envelope.Envelope, []envelope.Violation) {
	env, err := envelope.Decode(data)
	var ve *envelope.ValidationError
	switch {
	case err == nil:
		return accepted, env, nil
	case errors.Is(err, envelope.ErrUnsupportedVersion):
		return badVersion, nil, nil
	case errors.As(err, &ve):
		return invalid, nil, ve.Violations
	}
	return unknownResult, nil, nil
}

// beyondSchemaOnly reports whether every violation is of a rule a JSON
// Schema cannot state.
func beyondSchemaOnly(vs []envelope.Violation) bool {
	for _, v := range vs {
		if !slices.Contains(BeyondSchema(), v.Rule) {
			return false
		}
	}
	return len(vs) > 0
}

// checkAgreement checks the properties that hold for every document
// whatever it is: Decode's answer is typed; what Decode accepts the schema
// accepts; what the schema rejects Decode rejects; and when the schema
// accepts what Decode rejects, only rules beyond the schema are broken.
func checkAgreement(t testing.TB, sch *jsonschema.Schema, name string, data []byte) (verdict, error, *envelope.Envelope, []envelope.Violation) {
	dv, env, vs := decodeVerdict(data)
	serr := schemaCheck(sch, data)
	if dv == unknownResult {
		t.Fatalf("%s: Decode returned an untyped error", name)
	}
	if dv == accepted && serr != nil {
		t.Fatalf("%s: Decode accepts what the schema rejects: %v", name, serr)
	}
	if dv != accepted && serr == nil && (dv != invalid || !beyondSchemaOnly(vs)) {
		t.Fatalf("%s: the schema accepts what Decode rejects (%s) for a rule the schema states: %+v", name, dv, vs)
	}
	return dv, serr, env, vs
}

func TestSchemaFile(t *testing.T) {
	compileSchema(t)
	onDisk, err := os.ReadFile("../../envelope/dlq.v1.schema.json")
	require.NoError(t, err)
	require.Equal(t, string(onDisk), string(envelope.Schema()))
	s := envelope.Schema()
	s[0] = 'x'
	require.Equal(t, byte('{'), envelope.Schema()[0], "Schema returns a copy")
	require.Contains(t, string(onDisk), `"$id": "`+envelope.SchemaID+`"`)
	require.Contains(t, string(onDisk), `"$schema": "https://json-schema.org/draft/2020-12/schema"`)
}

// TestSchemaAgreesWithDecode runs every document of every corpus through
// Decode and the schema: the Builder's envelopes are valid for both (and
// restore their payload), each forged envelope is rejected by the
// enforcers it names.
func TestSchemaAgreesWithDecode(t *testing.T) {
	sch := compileSchema(t)
	built := builtCorpus(t, true)
	docs := append(append(append([]document{}, built...), forged(t, built)...), hostileForged(t)...)
	counts := map[string]int{}
	for _, d := range docs {
		dv, serr, env, vs := checkAgreement(t, sch, d.name, d.data)
		switch {
		case d.built:
			counts["built"]++
			require.Equal(t, accepted, dv, "%s: %+v\n%s", d.name, vs, clip(d.data))
			require.NoError(t, serr, d.name)
			var f envelope.Fetcher
			if d.store != nil {
				f = d.store.off
			}
			out, err := env.Restore(context.Background(), f)
			require.NoError(t, err, d.name)
			require.Equal(t, d.payload, out, d.name)
			sum := sha256.Sum256(out)
			require.Equal(t, env.PayloadSHA256, hex.EncodeToString(sum[:]), d.name)
		case d.invalid == "schema":
			counts["schema"]++
			require.NotEqual(t, accepted, dv, d.name)
			require.Error(t, serr, "%s: the schema accepts it", d.name)
		case d.invalid == "beyond":
			counts["beyond"]++
			require.Equal(t, invalid, dv, d.name)
			require.NoError(t, serr, "%s: the schema rejects it", d.name)
			require.True(t, beyondSchemaOnly(vs), "%s: %+v", d.name, vs)
		case d.hostile != nil:
			counts["hostile"]++
			// The hostile corpus says what Decode makes of it; the
			// agreement with the schema is checked above.
			d.hostile(t, dv, vs)
		default:
			counts["valid forged"]++
			require.Equal(t, accepted, dv, "%s: %+v", d.name, vs)
			require.NoError(t, serr, d.name)
		}
	}
	t.Logf("documents: %v", counts)
}

// FuzzSchemaAgreesWithDecode looks for a document on which Decode and the
// schema disagree, starting from every corpus document.
func FuzzSchemaAgreesWithDecode(f *testing.F) {
	built := builtCorpus(f, false)
	for _, d := range append(built, forged(f, built)...) {
		f.Add(d.data)
	}
	sch := compileSchema(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		checkAgreement(t, sch, "fuzz", data)
	})
}

func clip(b []byte) string {
	if len(b) > 2000 {
		return string(b[:2000]) + "…"
	}
	return string(b)
}
