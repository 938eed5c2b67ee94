package envelope

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/go-playground/validator/v10"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/classify"
)

// oracle is go-playground/validator over the struct tags: what
// fieldViolations must agree with. It lives in tests only, so that no
// program linking envelope links validator (whose tryCallValidateFn
// reaches reflect.Value.MethodByName).
func oracle(t testing.TB) *validator.Validate {
	v := validator.New(validator.WithRequiredStructEnabled())
	v.RegisterTagNameFunc(func(f reflect.StructField) string {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			return ""
		}
		return name
	})
	require.NoError(t, v.RegisterValidation("sha256hex", func(fl validator.FieldLevel) bool {
		return isHex64(fl.Field().String())
	}))
	require.NoError(t, v.RegisterValidation("finite", func(fl validator.FieldLevel) bool {
		f := fl.Field().Float()
		return !math.IsNaN(f) && !math.IsInf(f, 0)
	}))
	return v
}

// oracleViolations runs the oracle on s and converts its errors into
// violations (the conversion validate.go did before the checks were
// written by hand).
func oracleViolations(t testing.TB, v *validator.Validate, s any, prefix string) []Violation {
	err := v.Struct(s)
	if err == nil {
		return nil
	}
	var verrs validator.ValidationErrors
	require.True(t, errors.As(err, &verrs), "%v", err)
	var vs []Violation
	for _, fe := range verrs {
		field := fe.Namespace()
		if _, rest, ok := strings.Cut(field, "."); ok {
			field = rest
		}
		field = prefix + field
		msg := fmt.Sprintf("%s fails %q", field, fe.Tag())
		if fe.Param() != "" {
			msg += "=" + fe.Param()
		}
		vs = append(vs, violation(field, fe.Tag(), msg))
	}
	return vs
}

// Values near each rule's edges, for the generator.
var (
	edgeStrings = func() []string {
		var s []string
		for _, n := range []int{0, 1, 63, 64, 65, 255, 256, 257, 1023, 1024, 1025, 2047, 2048, 2049, 4095, 4096, 4097, 65535, 65536, 65537} {
			s = append(s, strings.Repeat("a", n))
		}
		// Multi-byte: 64 code points in 128 bytes (within max=64), 65 in 130.
		s = append(s, strings.Repeat("é", 64), strings.Repeat("é", 65), strings.Repeat("é", 1024), strings.Repeat("€", 1025))
		return s
	}()
	edgeInts  = []int64{math.MinInt64, -2, -1, 0, 1, 2, math.MaxInt32, math.MaxInt64}
	edgeFloat = []float64{0, -1.5, 180, math.NaN(), math.Inf(1), math.Inf(-1)}
	encodings = []string{"", "json", "string", "base64", "JSON", "hex", " json"}
	hexes     = []string{"", strings.Repeat("0", 64), strings.Repeat("a", 64), strings.Repeat("A", 64), strings.Repeat("f", 63), strings.Repeat("f", 65), strings.Repeat("g", 64)}
	routes    = []string{"", "retry", "poison", "Retry", "dead"}
)

// randomEnvelope draws every tagged field from its edge values.
func randomEnvelope(r *rand.Rand) *Envelope {
	str := func() string { return edgeStrings[r.IntN(len(edgeStrings))] }
	i64 := func() int64 { return edgeInts[r.IntN(len(edgeInts))] }
	pick := func(s []string) string { return s[r.IntN(len(s))] }
	e := &Envelope{
		SchemaVersion: pick([]string{"", SchemaVersion}), EventID: str(), IdempotencyKey: str(),
		FailureClass: classify.Class(pick([]string{"", "invalid_geometry", "x"})), FailedStage: classify.Stage(pick([]string{"", "parse"})),
		SourceCRS: str(), SourceEPSG: int(i64()), GeometryType: str(), VertexCount: int(i64()),
		RawPayloadEncoding: pick(encodings), RawPayloadOffloadURI: str(), PayloadSHA256: pick(hexes), PayloadSize: i64(),
		Attempts: int(i64()), Route: classify.Route(pick(routes)), TraceID: str(),
		Geometry: GeometryRef{InlineEncoding: pick(encodings), OffloadURI: str(), ByteSize: i64(), ContentSHA256: pick(hexes), PayloadOffset: i64()},
	}
	if r.IntN(3) > 0 {
		g := &GeometryError{Kind: str()}
		switch r.IntN(4) {
		case 1:
			g.Location = []float64{}
		case 2:
			g.Location = []float64{edgeFloat[r.IntN(len(edgeFloat))], edgeFloat[r.IntN(len(edgeFloat))]}
		case 3:
			g.Location = []float64{1, 2, 3}
		}
		if r.IntN(2) == 0 {
			epsg := int(i64())
			g.EPSG = &epsg
		}
		e.GeometryError = g
	}
	if r.IntN(3) > 0 {
		e.Source = randomSource(r)
	}
	return e
}

func randomSource(r *rand.Rand) *Source {
	str := func() string { return edgeStrings[r.IntN(len(edgeStrings))] }
	return &Source{System: str(), Topic: str(), MessageID: str(), GroupID: str(), DedupID: str(), DeliveryCount: int(edgeInts[r.IntN(len(edgeInts))])}
}

// TestFieldRulesAgreeWithValidator checks the hand-written field rules
// against go-playground/validator over the struct tags: the same
// violations (field, rule and message) in the same order, for envelopes
// whose every tagged field is drawn from values at its rule's edges, and
// for a valid envelope.
func TestFieldRulesAgreeWithValidator(t *testing.T) {
	v := oracle(t)
	r := rand.New(rand.NewPCG(21, 3))
	valid := validFieldsEnvelope()
	require.Empty(t, valid.fieldViolations(nil))
	require.Empty(t, oracleViolations(t, v, valid, ""))
	rules := map[string]bool{}
	for i := range 3000 {
		e := randomEnvelope(r)
		got := e.fieldViolations(nil)
		require.Equal(t, oracleViolations(t, v, e, ""), got, "envelope %d", i)
		for _, x := range got {
			rules[x.Rule] = true
		}
		s := randomSource(r)
		c := fieldCheck{prefix: "source."}
		c.source(s)
		require.Equal(t, oracleViolations(t, v, s, "source."), c.vs, "source %d", i)
	}
	for _, rule := range []string{"required", "max", "min", "oneof", "len", "finite", "sha256hex"} {
		require.True(t, rules[rule], "the generator never broke %q", rule)
	}
}

// TestEveryTagIsChecked guards the generator: a tagged field it does not
// vary would agree with the oracle without being tested.
func TestEveryTagIsChecked(t *testing.T) {
	var tagged []string
	for _, typ := range []reflect.Type{reflect.TypeFor[Envelope](), reflect.TypeFor[GeometryError](), reflect.TypeFor[GeometryRef](), reflect.TypeFor[Source]()} {
		for i := range typ.NumField() {
			f := typ.Field(i)
			if f.Tag.Get("validate") != "" {
				tagged = append(tagged, typ.Name()+"."+f.Name)
			}
		}
	}
	require.ElementsMatch(t, []string{
		"Envelope.SchemaVersion", "Envelope.EventID", "Envelope.IdempotencyKey", "Envelope.FailureClass", "Envelope.FailedStage",
		"Envelope.SourceCRS", "Envelope.SourceEPSG", "Envelope.GeometryType", "Envelope.VertexCount", "Envelope.RawPayloadEncoding",
		"Envelope.RawPayloadOffloadURI", "Envelope.PayloadSHA256", "Envelope.PayloadSize", "Envelope.Attempts", "Envelope.Route", "Envelope.TraceID",
		"GeometryError.Kind", "GeometryError.Location", "GeometryError.EPSG",
		"GeometryRef.InlineEncoding", "GeometryRef.OffloadURI", "GeometryRef.ByteSize", "GeometryRef.ContentSHA256", "GeometryRef.PayloadOffset",
		"Source.System", "Source.Topic", "Source.MessageID", "Source.GroupID", "Source.DedupID", "Source.DeliveryCount",
	}, tagged, "a validate tag was added or removed: check it in fields.go and vary it in randomEnvelope")
}

func validFieldsEnvelope() *Envelope {
	epsg := 4326
	return &Envelope{
		SchemaVersion: SchemaVersion, EventID: "evt-1", IdempotencyKey: "idem:v1:abc", FailureClass: "invalid_geometry", FailedStage: "topology_validation",
		GeometryError: &GeometryError{Kind: "Self-intersection", Location: []float64{0.5, 0.5}, EPSG: &epsg},
		Geometry:      GeometryRef{InlineEncoding: "json", ByteSize: 2, ContentSHA256: strings.Repeat("0", 64), PayloadOffset: 0},
		PayloadSHA256: strings.Repeat("a", 64), Attempts: 1, Route: "poison", Source: &Source{System: "kafka"},
	}
}

// BenchmarkFieldRules times the field rules of a valid envelope: by hand
// (what Validate runs) and by go-playground/validator over the tags (what
// it ran before), as the baseline.
func BenchmarkFieldRules(b *testing.B) {
	e := validFieldsEnvelope()
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if vs := e.fieldViolations(nil); len(vs) != 0 {
				b.Fatal(vs)
			}
		}
	})
	b.Run("validator", func(b *testing.B) {
		v := oracle(b)
		b.ReportAllocs()
		for b.Loop() {
			if err := v.Struct(e); err != nil {
				b.Fatal(err)
			}
		}
	})
}
