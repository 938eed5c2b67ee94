package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const stream = `{"Action":"start","Package":"example.com/a"}
{"Action":"run","Package":"example.com/a","Test":"TestOK"}
{"Action":"output","Package":"example.com/a","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"pass","Package":"example.com/a","Test":"TestOK","Elapsed":0.5}
{"Action":"run","Package":"example.com/a","Test":"TestServer"}
{"Action":"output","Package":"example.com/a","Test":"TestServer","Output":"    a_test.go:9: SKIPPING: Redis is unreachable\n"}
{"Action":"skip","Package":"example.com/a","Test":"TestServer","Elapsed":0}
{"Action":"run","Package":"example.com/a","Test":"TestSub/case"}
{"Action":"skip","Package":"example.com/a","Test":"TestSub/case","Elapsed":0}
{"Action":"pass","Package":"example.com/a","Elapsed":2.5}
{"Action":"run","Package":"example.com/b","Test":"TestBad"}
{"Action":"output","Package":"example.com/b","Test":"TestBad","Output":"    b_test.go:3: boom\n"}
{"Action":"fail","Package":"example.com/b","Test":"TestBad","Elapsed":0.1}
{"Action":"fail","Package":"example.com/b","Elapsed":7.25}
{"Action":"output","Package":"example.com/c","Output":"# example.com/c\nc.go:1: syntax error\n"}
{"Action":"fail","Package":"example.com/c","Elapsed":0}
{"Action":"skip","Package":"example.com/d","Elapsed":0}
`

func TestReport(t *testing.T) {
	allow, err := parseAllowlist(strings.NewReader("# why each may skip\n\nexample.com/a TestSub/case only on Windows\nexample.com/z TestGone a stale entry\n"))
	require.NoError(t, err)
	var out strings.Builder
	r, err := run(strings.NewReader(stream), &out, allow)
	require.NoError(t, err)
	require.Equal(t, 1, r.passed)
	require.Equal(t, 1, r.failed)
	require.Equal(t, 2, r.skipped)
	require.Equal(t, []string{"example.com/a TestServer"}, r.badSkips, "a skip not in the allowlist")
	require.Contains(t, out.String(), "SKIPPING: Redis is unreachable", "a skip's output is shown")
	require.Contains(t, out.String(), "boom", "a failure's output is shown")
	require.Contains(t, out.String(), "syntax error", "a package's build failure is shown")
	require.NotContains(t, out.String(), "=== RUN   TestOK", "a passing test's output is not")

	problems := verdict(r, allow)
	require.ElementsMatch(t, []string{
		"skipped without an allowlist entry: example.com/a TestServer",
		"failed: example.com/b TestBad",
		"failed: example.com/b",
		"failed: example.com/c",
		"allowlist line 4 (example.com/z TestGone) matched no skip: remove it",
	}, problems)

	var times strings.Builder
	writeTimes(&times, r)
	lines := strings.Split(strings.TrimSpace(times.String()), "\n")
	require.Len(t, lines, 5)
	require.Contains(t, lines[1], "example.com/b", "slowest first")
	require.Contains(t, lines[2], "example.com/a")
}

func TestCleanRunPasses(t *testing.T) {
	allow, err := parseAllowlist(strings.NewReader("example.com/a TestSub/case only on Windows\nexample.com/a TestServer needs Redis\n"))
	require.NoError(t, err)
	clean := strings.Join(strings.Split(stream, "\n")[:10], "\n")
	r, err := run(strings.NewReader(clean), &strings.Builder{}, allow)
	require.NoError(t, err)
	require.Empty(t, verdict(r, allow))
}

func TestNothingRanFails(t *testing.T) {
	r, err := run(strings.NewReader(`{"Action":"skip","Package":"example.com/d","Elapsed":0}`+"\n"), &strings.Builder{}, nil)
	require.NoError(t, err)
	require.Equal(t, []string{"no test passed"}, verdict(r, nil))
}

func TestAllowlistNeedsAReason(t *testing.T) {
	_, err := parseAllowlist(strings.NewReader("example.com/a TestX\n"))
	require.Error(t, err)
}

func TestBadInput(t *testing.T) {
	_, err := run(strings.NewReader("not json"), &strings.Builder{}, nil)
	require.Error(t, err)
}

func TestGlob(t *testing.T) {
	for _, c := range []struct {
		pattern, name string
		want          bool
	}{
		{"TestA", "TestA", true},
		{"TestA", "TestAB", false},
		{"Test*Conformance/*", "TestConformance/Purge", true},
		{"Test*Conformance/*", "TestS3Conformance/Large/40MiB", true},
		{"Test*Conformance/*", "TestConformance", false},
		{"github.com/geodlq/geodlq/*", "github.com/geodlq/geodlq/broker/kafka", true},
		{"github.com/geodlq/geodlq/*", "github.com/other/x", false},
		{"*", "", true},
		{"a*b*c", "abc", true},
		{"a*b*c", "acb", false},
		{"ab*ba", "aba", false},
	} {
		require.Equal(t, c.want, glob(c.pattern, c.name), "%q ~ %q", c.pattern, c.name)
	}
}
