package contracttest

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/testenv"
)

// python returns a Python 3 interpreter that has the jsonschema module:
// $GEODLQ_PYTHON, else Debian's /usr/bin/python3, else python3 on the
// PATH. Without one the test fails under GEODLQ_REQUIRE_SERVICES (as in
// `make test`, whose scripts/deps.sh installs python3-jsonschema) and is
// skipped loudly otherwise.
func python(t *testing.T) string {
	t.Helper()
	var candidates []string
	if p := os.Getenv("GEODLQ_PYTHON"); p != "" {
		candidates = append(candidates, p)
	}
	candidates = append(candidates, "/usr/bin/python3")
	if p, err := exec.LookPath("python3"); err == nil {
		candidates = append(candidates, p)
	}
	var tried []string
	for _, p := range candidates {
		out, err := exec.Command(p, "-c", "import jsonschema.validators, sys; print(sys.version_info[0])").CombinedOutput()
		if err == nil && bytes.Equal(bytes.TrimSpace(out), []byte("3")) {
			return p
		}
		tried = append(tried, p+": "+string(bytes.TrimSpace(out)))
	}
	msg := "no python3 with the jsonschema module (apt-get install python3-jsonschema, or run scripts/deps.sh); tried %q"
	if testenv.Required() {
		t.Fatalf(msg, tried)
	}
	t.Skipf("SKIPPING: "+msg+"; set GEODLQ_REQUIRE_SERVICES=1 to fail instead", tried)
	return ""
}

// pyResult is one line of `python3 -m geodlq_reader batch`.
type pyResult struct {
	Name         string  `json:"name"`
	Verdict      string  `json:"verdict"`
	Error        string  `json:"error"`
	Restored     string  `json:"restored"`
	SHA256       string  `json:"sha256"`
	RestoreError string  `json:"restore_error"`
	Seconds      float64 `json:"seconds"`
}

// runPython runs the reader's batch command over docs, one run per blob
// store, and returns its results by document name.
func runPython(t *testing.T, py string, docs []document) map[string]pyResult {
	t.Helper()
	contrib, err := filepath.Abs("../../contrib/python")
	require.NoError(t, err)
	dir := t.TempDir()
	groups := map[*blobStore][]int{}
	var order []*blobStore
	for i, d := range docs {
		if _, ok := groups[d.store]; !ok {
			order = append(order, d.store)
		}
		groups[d.store] = append(groups[d.store], i)
	}
	results := map[string]pyResult{}
	for g, bs := range order {
		manifest := filepath.Join(dir, "manifest-"+string(rune('a'+g))+".jsonl")
		var lines bytes.Buffer
		for _, i := range groups[bs] {
			line, err := json.Marshal(map[string]string{"name": docs[i].name, "path": writeDoc(t, dir, i, docs[i])})
			require.NoError(t, err)
			lines.Write(append(line, '\n'))
		}
		require.NoError(t, os.WriteFile(manifest, lines.Bytes(), 0o600))
		args := []string{"-m", "geodlq_reader", "batch", manifest}
		if bs != nil {
			args = append(args, "--blob-dir", bs.dir, "--base-uri", bs.baseURI, "--prefix", bs.prefix)
		}
		cmd := exec.Command(py, args...)
		cmd.Dir = contrib
		cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		start := time.Now()
		out, err := cmd.Output()
		require.NoError(t, err, "python reader: %s", stderr.String())
		t.Logf("python: %d documents in %v", len(groups[bs]), time.Since(start).Round(time.Millisecond))
		sc := bufio.NewScanner(bytes.NewReader(out))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var r pyResult
			require.NoError(t, json.Unmarshal(sc.Bytes(), &r), sc.Text())
			results[r.Name] = r
		}
		require.NoError(t, sc.Err())
	}
	require.Len(t, results, len(docs))
	slow := slices.SortedFunc(maps.Values(results), func(a, b pyResult) int { return cmp.Compare(b.Seconds, a.Seconds) })
	for _, r := range slow[:min(3, len(slow))] {
		t.Logf("python: %s took %.3fs", r.Name, r.Seconds)
	}
	return results
}

// TestPythonReader runs contrib/python's reader over every document of
// TestSchemaAgreesWithDecode: it must accept exactly what Decode accepts
// (and call a bad version a bad version), and restore every valid
// envelope to the bytes envelope.Restore returns, whose SHA-256 is
// payload_sha256.
func TestPythonReader(t *testing.T) {
	py := python(t)
	built := builtCorpus(t, true)
	docs := append(append(append([]document{}, built...), forged(t, built)...), hostileForged(t)...)
	results := runPython(t, py, docs)
	restored := 0
	for _, d := range docs {
		r := results[d.name]
		dv, env, vs := decodeVerdict(d.data)
		if utf8.Valid(d.data) && json.Valid(d.data) || dv == accepted {
			require.Equal(t, string(dv), r.Verdict, "%s: Decode %+v; Python: %s", d.name, vs, r.Error)
		} else {
			require.NotEqual(t, "ok", r.Verdict, "%s: Python accepts a document that is not JSON text", d.name)
		}
		if dv != accepted {
			continue
		}
		var f envelope.Fetcher
		if d.store != nil {
			f = d.store.off
		}
		want, err := env.Restore(context.Background(), f)
		if err != nil {
			require.NotEmpty(t, r.RestoreError, "%s: Go cannot restore (%v) but Python can", d.name, err)
			continue
		}
		require.Empty(t, r.RestoreError, d.name)
		got, err := os.ReadFile(r.Restored)
		require.NoError(t, err)
		require.Equal(t, want, got, "%s: Python restored other bytes than Go", d.name)
		require.Equal(t, env.PayloadSHA256, r.SHA256, d.name)
		sum := sha256.Sum256(got)
		require.Equal(t, env.PayloadSHA256, hex.EncodeToString(sum[:]), d.name)
		if d.built {
			require.Equal(t, d.payload, got, d.name)
		}
		restored++
	}
	t.Logf("%d documents, %d restored byte for byte by Python", len(docs), restored)
}

// mutate returns data with one random edit: a byte deleted, replaced or
// inserted (mostly JSON's structural characters, escapes and digits), or
// a span repeated.
func mutate(r *rand.Rand, data []byte) []byte {
	const alphabet = `[]{},:" \0-+.eE1\\u/nt`
	out := append([]byte{}, data...)
	i := r.IntN(len(out))
	switch r.IntN(4) {
	case 0:
		return append(out[:i], out[i+1:]...)
	case 1:
		out[i] = alphabet[r.IntN(len(alphabet))]
		return out
	case 2:
		return slices.Insert(out, i, alphabet[r.IntN(len(alphabet))])
	}
	j := min(len(out), i+1+r.IntN(64))
	return slices.Insert(out, j, out[i:j]...)
}

// TestPythonReaderAgreesOnMutations edits the corpus's envelopes at
// random (a fixed seed) and checks that the Python reader gives each
// edited document Decode's verdict: its scanner skips what it does not
// keep in runs, and must find every syntax error that Decode finds.
func TestPythonReaderAgreesOnMutations(t *testing.T) {
	py := python(t)
	built := builtCorpus(t, false)
	var bases []document
	for _, d := range append(built, forged(t, built)...) {
		if len(d.data) < 64<<10 {
			bases = append(bases, d)
		}
	}
	r := rand.New(rand.NewPCG(19, 7))
	var docs []document
	for k := range 2000 {
		base := bases[r.IntN(len(bases))]
		data := base.data
		for range 1 + r.IntN(3) {
			data = mutate(r, data)
		}
		docs = append(docs, document{name: fmt.Sprintf("mutation %d of %s", k, base.name), data: data})
	}
	results := runPython(t, py, docs)
	counts := map[verdict]int{}
	for _, d := range docs {
		res := results[d.name]
		dv, _, vs := decodeVerdict(d.data)
		counts[dv]++
		if utf8.Valid(d.data) && json.Valid(d.data) || dv == accepted {
			require.Equal(t, string(dv), res.Verdict, "%s: Decode %+v; Python: %s\n%q", d.name, vs, res.Error, d.data)
		} else {
			require.NotEqual(t, "ok", res.Verdict, "%s: Python accepts a document that is not JSON text\n%q", d.name, d.data)
		}
	}
	t.Logf("Decode's verdicts on %d edited envelopes: %v", len(docs), counts)
}
