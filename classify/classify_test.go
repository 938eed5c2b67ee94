package classify_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/paulmach/orb"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/classify"
)

type statusErr int

func (s statusErr) Error() string   { return fmt.Sprintf("HTTP %d", int(s)) }
func (s statusErr) StatusCode() int { return int(s) }

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func jsonSyntaxErr() error {
	var v any
	return json.Unmarshal([]byte(`{"a":`), &v)
}

func jsonTypeErr() error {
	var v struct{ A int }
	return json.Unmarshal([]byte(`{"A":"x"}`), &v)
}

func TestClassify(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want classify.Class
	}{
		{"nil", nil, ""},
		{"plain", errors.New("boom"), classify.ClassUnknown},
		{"marked transient", classify.Transient(errors.New("x")), classify.ClassTransient},
		{"marked invalid", classify.InvalidGeometry(errors.New("x")), classify.ClassInvalidGeometry},
		{"marked schema", classify.SchemaViolation(errors.New("x")), classify.ClassSchemaViolation},
		{"marked crs", classify.CRSMismatch(errors.New("x"), 3857), classify.ClassCRSMismatch},
		{"marked exhausted", classify.ResourceExhausted(errors.New("x")), classify.ClassResourceExhausted},
		{"wrapped mark", fmt.Errorf("stage: %w", classify.InvalidGeometry(errors.New("x"))), classify.ClassInvalidGeometry},
		{"joined mark", errors.Join(errors.New("a"), classify.SchemaViolation(errors.New("b"))), classify.ClassSchemaViolation},
		{"stage only defers", classify.WithStage(classify.CRSMismatch(errors.New("x"), 0), classify.StageParse), classify.ClassCRSMismatch},
		{"outer mark wins", classify.Transient(classify.InvalidGeometry(errors.New("x"))), classify.ClassTransient},
		{"mark beats json", classify.Transient(jsonSyntaxErr()), classify.ClassTransient},
		{"deadline", context.DeadlineExceeded, classify.ClassTransient},
		{"wrapped deadline", fmt.Errorf("db: %w", context.DeadlineExceeded), classify.ClassTransient},
		{"net timeout", &net.OpError{Op: "read", Err: timeoutErr{}}, classify.ClassTransient},
		{"conn reset", &net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, classify.ClassTransient},
		{"conn refused", &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, classify.ClassTransient},
		{"unexpected eof", fmt.Errorf("body: %w", io.ErrUnexpectedEOF), classify.ClassTransient},
		{"http 429", statusErr(429), classify.ClassTransient},
		{"http 502", fmt.Errorf("tiles: %w", statusErr(502)), classify.ClassTransient},
		{"http 503", statusErr(503), classify.ClassTransient},
		{"http 504", statusErr(504), classify.ClassTransient},
		{"http 500", statusErr(500), classify.ClassUnknown},
		{"http 400", statusErr(400), classify.ClassUnknown},
		{"json syntax", jsonSyntaxErr(), classify.ClassSchemaViolation},
		{"json type", jsonTypeErr(), classify.ClassSchemaViolation},
		{"wrapped json", fmt.Errorf("decode: %w", jsonSyntaxErr()), classify.ClassSchemaViolation},
		{"canceled is not transient by rule", context.Canceled, classify.ClassUnknown},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, classify.Classify(tc.err))
		})
	}
}

func TestUserRules(t *testing.T) {
	errOOM := errors.New("cannot allocate memory")
	c := classify.NewClassifier(func(err error) (classify.Class, bool) {
		if errors.Is(err, errOOM) {
			return classify.ClassResourceExhausted, true
		}
		return "", false
	}, func(error) (classify.Class, bool) { return classify.Class("bogus"), true }) // invalid result is ignored
	require.Equal(t, classify.ClassResourceExhausted, c.Classify(fmt.Errorf("x: %w", errOOM)))
	require.Equal(t, classify.ClassTransient, c.Classify(context.DeadlineExceeded), "defaults still apply after user rules")
	require.Equal(t, classify.ClassInvalidGeometry, c.Classify(classify.InvalidGeometry(errOOM)), "a mark beats user rules")
}

func TestStageAndDetail(t *testing.T) {
	loc := orb.Point{0.5, 0.5}
	inner := &classify.Error{Class: classify.ClassInvalidGeometry, Stage: classify.StageTopologyValidation,
		Geometry: &classify.GeometryDetail{Reason: "Self-intersection[0.5 0.5]", Location: &loc}}
	err := classify.WithStage(fmt.Errorf("handler: %w", inner), classify.StagePersist)
	require.Equal(t, classify.StageTopologyValidation, classify.StageOf(err), "the innermost stage wins")
	require.Equal(t, "Self-intersection[0.5 0.5]", classify.DetailOf(err).Reason)
	require.Equal(t, classify.ClassInvalidGeometry, classify.Classify(err))
	require.Equal(t, classify.StagePersist, classify.StageOf(classify.WithStage(errors.New("x"), classify.StagePersist)))
	require.Equal(t, classify.Stage(""), classify.StageOf(errors.New("x")))
	require.Nil(t, classify.DetailOf(errors.New("x")))
	require.Nil(t, classify.WithStage(nil, classify.StageParse))

	var ce *classify.Error
	require.True(t, errors.As(err, &ce), "found with errors.As")
	require.Equal(t, 3857, classify.DetailOf(classify.CRSMismatch(errors.New("EPSG:3857"), 3857)).EPSG)
	require.Equal(t, classify.KindCRSUnparseable, classify.DetailOf(classify.CRSMismatch(errors.New("?"), 0)).Kind)
}

func TestErrorMessage(t *testing.T) {
	require.Equal(t, "boom", classify.Transient(errors.New("boom")).Error(), "the cause's message, verbatim")
	e := &classify.Error{Class: classify.ClassInvalidGeometry, Geometry: &classify.GeometryDetail{Reason: "Ring is not closed[1 2]"}}
	require.Equal(t, "Ring is not closed[1 2]", e.Error())
	require.NotPanics(t, func() { _ = (&classify.Error{}).Error() })
}

func TestNamesRoundTrip(t *testing.T) {
	for _, c := range classify.Classes() {
		b, err := c.MarshalText()
		require.NoError(t, err)
		var back classify.Class
		require.NoError(t, back.UnmarshalText(b))
		require.Equal(t, c, back)
	}
	for _, s := range classify.Stages() {
		b, err := s.MarshalText()
		require.NoError(t, err)
		var back classify.Stage
		require.NoError(t, back.UnmarshalText(b))
		require.Equal(t, s, back)
	}
	_, err := classify.ParseClass("poison")
	require.ErrorIs(t, err, classify.ErrUnknownName)
	_, err = classify.ParseStage("")
	require.ErrorIs(t, err, classify.ErrUnknownName)
	_, err = classify.Class("").MarshalText()
	require.Error(t, err)
	require.Equal(t, `Class("poison")`, classify.Class("poison").String())
	require.Equal(t, `Stage("")`, classify.Stage("").String())
	require.Equal(t, []string{"transient", "invalid_geometry", "schema_violation", "crs_mismatch", "resource_exhausted", "unknown"},
		func() (s []string) {
			for _, c := range classify.Classes() {
				s = append(s, c.String())
			}
			return
		}())
}

func TestReplayable(t *testing.T) {
	for _, tc := range []struct {
		c          classify.Class
		replayable bool
	}{
		{classify.ClassTransient, true}, {classify.ClassUnknown, true},
		{classify.ClassInvalidGeometry, false}, {classify.ClassSchemaViolation, false},
		{classify.ClassCRSMismatch, false}, {classify.ClassResourceExhausted, false},
	} {
		require.Equal(t, tc.replayable, tc.c.Replayable(), tc.c)
		require.Equal(t, !tc.replayable, tc.c.Deterministic(), tc.c)
		want := classify.RoutePoison
		if tc.replayable {
			want = classify.RouteRetry
		}
		require.Equal(t, want, classify.RouteFor(tc.c))
	}
	require.False(t, classify.Class("").Deterministic())
}

func TestKindOfReason(t *testing.T) {
	for reason, want := range map[string]classify.ReasonKind{
		"Self-intersection[0.5 0.5]":                classify.KindSelfIntersection,
		"Ring Self-intersection[1 1]":               classify.KindRingSelfIntersection,
		"Ring is not closed[0 0]":                   classify.KindRingNotClosed,
		"Too few points in geometry component[0 0]": classify.KindTooFewPoints,
		"Invalid Coordinate[nan nan]":               classify.KindInvalidCoordinate,
		"Hole lies outside shell[5 5]":              classify.KindHoleOutsideShell,
		"Nested holes[1 1]":                         classify.KindNestedHoles,
		"Interior is disconnected[1 1]":             classify.KindDisconnectedInterior,
		"Nested shells[0 0]":                        classify.KindNestedShells,
		"Duplicate Rings[0 0]":                      classify.KindDuplicateRings,
		"something else":                            classify.KindOther,
		"":                                          "",
	} {
		require.Equal(t, want, classify.KindOfReason(reason), reason)
	}
}

func fixedRand(v float64) func() float64 { return func() float64 { return v } }

func TestDecide(t *testing.T) {
	p := classify.Policy{MaxAttempts: 4, BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second, Rand: fixedRand(0.5)}
	tests := []struct {
		name    string
		err     error
		attempt int
		action  classify.Action
		dest    classify.Route
		delay   time.Duration
	}{
		{"transient first", classify.Transient(errors.New("x")), 1, classify.ActionRetry, "", 50 * time.Millisecond},
		{"transient second", classify.Transient(errors.New("x")), 2, classify.ActionRetry, "", 100 * time.Millisecond},
		{"transient third", classify.Transient(errors.New("x")), 3, classify.ActionRetry, "", 200 * time.Millisecond},
		{"transient budget spent", classify.Transient(errors.New("x")), 4, classify.ActionDeadLetter, classify.RouteRetry, 0},
		{"transient past budget", classify.Transient(errors.New("x")), 9, classify.ActionDeadLetter, classify.RouteRetry, 0},
		{"unknown retried", errors.New("?"), 1, classify.ActionRetry, "", 50 * time.Millisecond},
		{"unknown budget spent", errors.New("?"), 4, classify.ActionDeadLetter, classify.RouteRetry, 0},
		{"invalid geometry at once", classify.InvalidGeometry(errors.New("x")), 1, classify.ActionDeadLetter, classify.RoutePoison, 0},
		{"schema at once", jsonSyntaxErr(), 1, classify.ActionDeadLetter, classify.RoutePoison, 0},
		{"crs at once", classify.CRSMismatch(errors.New("x"), 3857), 1, classify.ActionDeadLetter, classify.RoutePoison, 0},
		{"exhausted at once", classify.ResourceExhausted(errors.New("x")), 1, classify.ActionDeadLetter, classify.RoutePoison, 0},
		{"attempt zero is one", classify.Transient(errors.New("x")), 0, classify.ActionRetry, "", 50 * time.Millisecond},
		{"nil is unknown", nil, 1, classify.ActionRetry, "", 50 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := p.Decide(tc.err, tc.attempt)
			require.Equal(t, tc.action, d.Action)
			require.Equal(t, tc.dest, d.Route)
			require.Equal(t, tc.delay, d.Delay)
			require.GreaterOrEqual(t, d.Attempt, 1)
		})
	}
}

func TestCeilingAndJitter(t *testing.T) {
	p := classify.Policy{BaseDelay: 500 * time.Millisecond, MaxDelay: 30 * time.Second}
	for attempt, want := range map[int]time.Duration{
		1: 500 * time.Millisecond, 2: time.Second, 3: 2 * time.Second, 6: 16 * time.Second, 7: 30 * time.Second, 1000: 30 * time.Second,
	} {
		require.Equal(t, want, p.Ceiling(attempt), "attempt %d", attempt)
	}
	require.Equal(t, classify.DefaultBaseDelay, classify.Policy{}.Ceiling(1))
	huge := classify.Policy{BaseDelay: time.Duration(1 << 62), MaxDelay: time.Duration(1<<63 - 1)}
	require.Positive(t, huge.Ceiling(64), "no overflow")

	// Full jitter: delays spread over [0, ceiling], never beyond.
	r := classify.Policy{BaseDelay: time.Second, MaxDelay: time.Minute}
	lo, hi := time.Hour, time.Duration(0)
	for range 2000 {
		d := r.Backoff(3)
		require.GreaterOrEqual(t, d, time.Duration(0))
		require.LessOrEqual(t, d, 4*time.Second)
		lo, hi = min(lo, d), max(hi, d)
	}
	require.Less(t, lo, 400*time.Millisecond, "full jitter reaches near zero")
	require.Greater(t, hi, 3600*time.Millisecond, "and near the ceiling")
	require.Equal(t, time.Duration(0), classify.Policy{Rand: fixedRand(1.5)}.Backoff(1), "out-of-range randomness is clamped")
}

func BenchmarkClassify(b *testing.B) {
	err := error(&classify.Error{Class: classify.ClassInvalidGeometry, Stage: classify.StageTopologyValidation, Err: errors.New("Self-intersection[0.5 0.5]")})
	b.Run("typed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if classify.Classify(err) != classify.ClassInvalidGeometry {
				b.Fatal("wrong class")
			}
		}
	})
	wrapped := fmt.Errorf("handler: %w", fmt.Errorf("stage: %w", err))
	b.Run("typed-wrapped", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if classify.Classify(wrapped) != classify.ClassInvalidGeometry {
				b.Fatal("wrong class")
			}
		}
	})
	p := classify.Policy{Rand: fixedRand(0.25)}
	b.Run("decide-typed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = p.Decide(err, 1)
		}
	})
	plain := errors.New("boom")
	b.Run("default-rules", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = classify.Classify(plain)
		}
	})
}

func TestParseClasses(t *testing.T) {
	cases := []struct {
		in      string
		want    []classify.Class
		wantErr bool
	}{
		{"", nil, false},
		{" , ", nil, false},
		{"transient", []classify.Class{classify.ClassTransient}, false},
		{"transient, unknown,invalid_geometry", []classify.Class{classify.ClassTransient, classify.ClassUnknown, classify.ClassInvalidGeometry}, false},
		{"transient,bogus", nil, true},
		{"Transient", nil, true},
	}
	for _, tc := range cases {
		got, err := classify.ParseClasses(tc.in)
		if tc.wantErr {
			require.ErrorIs(t, err, classify.ErrUnknownName, "%q", tc.in)
			continue
		}
		require.NoError(t, err, "%q", tc.in)
		require.Equal(t, tc.want, got, "%q", tc.in)
	}
}

// TestClassList parses class lists the way a command line gives them:
// one flag or several, duplicates kept once, an unknown name refused
// without changing the list.
func TestClassList(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		want    classify.ClassList
		str     string
		wantErr bool
	}{
		{"absent", nil, nil, "", false},
		{"one", []string{"-class", "transient"}, classify.ClassList{classify.ClassTransient}, "transient", false},
		{"a list", []string{"-class", "transient, unknown"}, classify.ClassList{classify.ClassTransient, classify.ClassUnknown}, "transient,unknown", false},
		{"repeated", []string{"-class", "crs_mismatch", "-class", "invalid_geometry,crs_mismatch"},
			classify.ClassList{classify.ClassCRSMismatch, classify.ClassInvalidGeometry}, "crs_mismatch,invalid_geometry", false},
		{"blank", []string{"-class", " , "}, nil, "", false},
		{"unknown", []string{"-class", "transient,nonsense"}, nil, "", true},
		{"unknown after a good one", []string{"-class", "unknown", "-class", "Transient"}, classify.ClassList{classify.ClassUnknown}, "unknown", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got classify.ClassList
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			fs.Var(&got, "class", "classes")
			err := fs.Parse(tc.args)
			if tc.wantErr {
				require.ErrorContains(t, err, "invalid value")
				require.ErrorIs(t, got.Set("nonsense"), classify.ErrUnknownName)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.str, got.String())
		})
	}
	require.Equal(t, "classes", classify.ClassList(nil).Type())
	require.Equal(t, `Class("bogus")`, classify.ClassList{"bogus"}.String(), "an invalid class shows as such")
}

// TestMarkersNilInNilOut checks the one rule every marker follows: nil in,
// nil out, so a marker is safe on the success path.
func TestMarkersNilInNilOut(t *testing.T) {
	markers := map[string]func(error) error{
		"Mark":              func(err error) error { return classify.Mark(err, classify.ClassUnknown) },
		"Transient":         classify.Transient,
		"RetryAfter":        func(err error) error { return classify.RetryAfter(err, time.Second) },
		"InvalidGeometry":   classify.InvalidGeometry,
		"SchemaViolation":   classify.SchemaViolation,
		"CRSMismatch":       func(err error) error { return classify.CRSMismatch(err, 3857) },
		"ResourceExhausted": classify.ResourceExhausted,
		"WithStage":         func(err error) error { return classify.WithStage(err, classify.StageParse) },
	}
	cause := errors.New("cause")
	for name, mark := range markers {
		t.Run(name, func(t *testing.T) {
			require.NoError(t, mark(nil), "nil in, nil out")
			err := mark(cause)
			require.Error(t, err)
			require.ErrorIs(t, err, cause, "a mark unwraps to its cause")
			require.Equal(t, "cause", err.Error(), "a mark keeps the cause's message verbatim")
		})
	}
}

func TestRoutes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want classify.Route
		ok   bool
	}{
		{"retry", classify.RouteRetry, true},
		{"poison", classify.RoutePoison, true},
		{"", "", false},
		{"Poison", "", false},
		{"transient", "", false},
	} {
		got, err := classify.ParseRoute(tc.in)
		if !tc.ok {
			require.ErrorIs(t, err, classify.ErrUnknownName, tc.in)
			require.False(t, classify.Route(tc.in).Valid())
			_, err = classify.Route(tc.in).MarshalText()
			require.ErrorIs(t, err, classify.ErrUnknownName)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.want, got)
		b, err := got.MarshalText()
		require.NoError(t, err)
		require.Equal(t, tc.in, string(b))
		var back classify.Route
		require.NoError(t, back.UnmarshalText(b))
		require.Equal(t, got, back)
	}
}

// retryAfterErr is an HTTP client's error carrying a Retry-After header.
type retryAfterErr struct{ d time.Duration }

func (e retryAfterErr) Error() string             { return "HTTP 429" }
func (e retryAfterErr) StatusCode() int           { return 429 }
func (e retryAfterErr) RetryAfter() time.Duration { return e.d }

func TestRetryAfter(t *testing.T) {
	p := classify.Policy{MaxAttempts: 3, BaseDelay: 10 * time.Millisecond, MaxRetryAfter: time.Minute, Rand: fixedRand(0.5)}
	for _, tc := range []struct {
		name    string
		err     error
		attempt int
		action  classify.Action
		route   classify.Route
		delay   time.Duration
	}{
		{"marked delay is waited exactly", classify.RetryAfter(errors.New("slow down"), 7*time.Second), 1, classify.ActionRetry, "", 7 * time.Second},
		{"wrapped marked delay", fmt.Errorf("tiles: %w", classify.RetryAfter(errors.New("503"), 2*time.Second)), 1, classify.ActionRetry, "", 2 * time.Second},
		{"server header through the chain", fmt.Errorf("geocode: %w", retryAfterErr{3 * time.Second}), 1, classify.ActionRetry, "", 3 * time.Second},
		{"a backoff longer than the delay wins", classify.RetryAfter(errors.New("x"), time.Nanosecond), 1, classify.ActionRetry, "", 5 * time.Millisecond},
		{"over MaxRetryAfter: dead-letter to retry now", classify.RetryAfter(errors.New("x"), time.Hour), 1, classify.ActionDeadLetter, classify.RouteRetry, 0},
		{"budget still applies", classify.RetryAfter(errors.New("x"), time.Second), 3, classify.ActionDeadLetter, classify.RouteRetry, 0},
		{"a deterministic class ignores the delay", classify.InvalidGeometry(retryAfterErr{time.Second}), 1, classify.ActionDeadLetter, classify.RoutePoison, 0},
		{"negative delay is none", classify.RetryAfter(errors.New("x"), -time.Second), 1, classify.ActionRetry, "", 5 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := p.Decide(tc.err, tc.attempt)
			require.Equal(t, tc.action, d.Action)
			require.Equal(t, tc.route, d.Route)
			require.Equal(t, tc.delay, d.Delay)
		})
	}
	require.Equal(t, classify.ClassTransient, classify.Classify(classify.RetryAfter(errors.New("x"), time.Second)))
	require.Equal(t, time.Duration(0), classify.RetryAfterOf(errors.New("x")))
	require.Equal(t, time.Duration(0), classify.RetryAfterOf(nil))
}

func TestTooLargeError(t *testing.T) {
	err := fmt.Errorf("publish: %w", &classify.TooLargeError{What: "envelope", Destination: "t.poison.dlt", Size: 300, Limit: 256, Hint: "configure an Offloader"})
	require.ErrorIs(t, err, classify.ErrTooLarge)
	var tl *classify.TooLargeError
	require.True(t, errors.As(err, &tl))
	require.Equal(t, 256, tl.Limit)
	require.Equal(t, `publish: envelope of 300 bytes exceeds the 256-byte limit of "t.poison.dlt" (configure an Offloader)`, err.Error())
	require.Equal(t, "message of 2 bytes exceeds the 1-byte limit", (&classify.TooLargeError{Size: 2, Limit: 1}).Error())
	require.Equal(t, classify.ClassResourceExhausted, classify.Classify(err), "too large is resource_exhausted by default")
}
