//go:build linux

package contracttest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/corpus"
)

// memorySize is the size of the envelopes whose reading is measured: the
// size of the envelope that took the Python reader 2.5 GB (issue 19).
const memorySize = 21 << 20

// measureScript reads one envelope with the Python reader and prints the
// process's peak resident set (KiB) before reading the file and after
// reading and restoring it, and the verdict. The peak is VmHWM, that of
// the process's own memory: getrusage's ru_maxrss keeps, across exec, the
// resident set of the Go test that forked it. The address space is
// limited to 10 times the envelope's size beyond what is mapped once the
// reader is ready, so that a regression fails with a LimitError rather
// than taking the machine's memory.
const measureScript = `
import json, os, resource, sys
sys.path.insert(0, ".")
from geodlq_reader import Reader, EnvelopeError

def status_kib(field):
    with open("/proc/self/status") as f:
        return [int(l.split()[1]) for l in f if l.startswith(field + ":")][0]

reader = Reader()
limit = (status_kib("VmSize") << 10) + 10 * os.path.getsize(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
base = status_kib("VmHWM")
with open(sys.argv[1], "rb") as f:
    data = f.read()
verdict, error = "ok", ""
try:
    env = reader.read(data)
    out = env.restore(None)
    del out
except EnvelopeError as e:
    verdict, error = type(e).__name__, str(e)[:300]
peak = status_kib("VmHWM")
print(json.dumps({"size": len(data), "base_kib": base, "peak_kib": peak, "verdict": verdict, "error": error}))
`

// limitScript runs the reader's command line (its arguments follow) with
// the address space limited to what the interpreter has mapped once the
// reader is imported, plus the budget in MiB given first.
const limitScript = `
import resource, sys
sys.path.insert(0, ".")
from geodlq_reader import __main__ as cli
budget = int(sys.argv[1]) << 20
with open("/proc/self/status") as f:
    vm = [int(l.split()[1]) << 10 for l in f if l.startswith("VmSize:")][0]
resource.setrlimit(resource.RLIMIT_AS, (vm + budget, vm + budget))
sys.exit(cli.main(sys.argv[2:]))
`

// memoryDoc is an envelope to measure and the most the Python reader may
// take to read and restore it, as a multiple of its size.
type memoryDoc struct {
	name  string
	data  []byte
	bound float64
}

// memoryDocs builds envelopes of about memorySize: the Builder's, of the
// hostile payloads that cost most (a long string, ordinates, nesting
// beyond what is embedded as JSON, empty arrays, bytes that are not
// UTF-8), and forged
// ones that Decode accepts (unknown members: a long name deep down, a
// long name, two million of them).
func memoryDocs(t *testing.T) []memoryDoc {
	t.Helper()
	b := newBuilder(t, nil)
	build := func(payload []byte) []byte {
		_, data, err := b.Build(context.Background(), envelope.Input{Payload: payload, IdempotencyKey: "idem:v1:memory",
			Err: classify.ResourceExhausted(errors.New("vertex budget exceeded"))})
		require.NoError(t, err)
		return data
	}
	var docs []memoryDoc
	families := map[string]int{"utf8_huge_string": memorySize, "number_many_ordinates": memorySize / 2,
		"depth_properties_mixed": memorySize}
	for _, f := range corpus.Hostile() {
		if size, ok := families[f.Name]; ok {
			docs = append(docs, memoryDoc{name: "hostile/" + f.Name, data: build(f.Generate(size).Data), bound: 4})
		}
	}
	require.Len(t, docs, len(families), "a hostile family was renamed")
	empty := []byte(`{"geometry":{"type":"Point","coordinates":[1,2]},"properties":{"a":[` +
		strings.Repeat("[],", memorySize/3) + `[]]}}`)
	docs = append(docs, memoryDoc{name: "built/empty arrays", data: build(empty), bound: 4})
	docs = append(docs, memoryDoc{name: "built/not UTF-8 (base64)", data: build(bytes.Repeat([]byte("\xff\x00 geometry "), memorySize/12)), bound: 4})

	base := build([]byte(`{"event_id":"e-1","geometry":{"type":"Point","coordinates":[1,2]}}`))
	head := []byte(`{"schema_version":"dlq.v1",`)
	require.True(t, bytes.HasPrefix(base, head))
	forge := func(name string, member []byte, bound float64) {
		data := append(append(append(append([]byte{}, head...), member...), ','), base[len(head):]...)
		docs = append(docs, memoryDoc{name: "forged/" + name, data: data, bound: bound})
	}
	forge("a long name deep in an unknown member", []byte(`"x":`+strings.Repeat("[", 2000)+`{"`+strings.Repeat("k", memorySize)+`":1}`+strings.Repeat("]", 2000)), 4)
	forge("a long string deep in an unknown member", []byte(`"x":`+strings.Repeat("[", 2000)+`"`+strings.Repeat("s", memorySize)+`"`+strings.Repeat("]", 2000)), 4)
	forge("a long unknown member name", []byte(`"`+strings.Repeat("k", memorySize)+`":1`), 4)
	var many bytes.Buffer
	for i := 0; many.Len() < memorySize; i++ {
		if i > 0 {
			many.WriteByte(',')
		}
		fmt.Fprintf(&many, `"a%d":0`, i)
	}
	forge("two million unknown members", many.Bytes(), 6)
	return docs
}

type memoryResult struct {
	Size    int    `json:"size"`
	BaseKiB int64  `json:"base_kib"`
	PeakKiB int64  `json:"peak_kib"`
	Verdict string `json:"verdict"`
	Error   string `json:"error"`
}

// TestPythonReaderMemory measures the peak resident memory the Python
// reader takes to read and restore envelopes of 21 MB, each in a process
// of its own, against their size: it must stay a small multiple of it
// (the reader before issue 19 took 2.5 GB for the first forged one, 119
// times its size). Its verdict must be Decode's. Go's allocations for the
// same work are logged beside it.
func TestPythonReaderMemory(t *testing.T) {
	py := python(t)
	contrib, err := filepath.Abs("../../contrib/python")
	require.NoError(t, err)
	dir := t.TempDir()
	var over []string
	for i, d := range memoryDocs(t) {
		p := filepath.Join(dir, fmt.Sprintf("%02d.json", i))
		require.NoError(t, os.WriteFile(p, d.data, 0o600))

		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		env, derr := envelope.Decode(d.data)
		if derr == nil {
			_, err := env.Restore(context.Background(), nil)
			require.NoError(t, err, d.name)
		}
		runtime.ReadMemStats(&m1)
		env = nil

		cmd := exec.Command(py, "-c", measureScript, p)
		cmd.Dir = contrib
		cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		require.NoError(t, err, "%s: %s", d.name, stderr.String())
		var r memoryResult
		require.NoError(t, json.Unmarshal(out, &r), string(out))
		require.Equal(t, len(d.data), r.Size)
		used := float64(r.PeakKiB-r.BaseKiB) * 1024
		ratio := used / float64(len(d.data))
		t.Logf("%-45s %5.1f MB: Python peak RSS +%6.1f MB (%.2f× its size); Go Decode+Restore allocate %6.1f MB in all",
			d.name, float64(len(d.data))/1e6, used/1e6, ratio, float64(m1.TotalAlloc-m0.TotalAlloc)/1e6)
		want := "ok"
		if derr != nil {
			want = "InvalidEnvelope"
		}
		switch {
		case r.Verdict != want:
			over = append(over, fmt.Sprintf("%s: Python says %s (%s), Decode %v", d.name, r.Verdict, r.Error, derr))
		case ratio > d.bound:
			over = append(over, fmt.Sprintf("%s: %.2f times its size, more than %g", d.name, ratio, d.bound))
		}
		require.NoError(t, os.Remove(p))
	}
	require.Empty(t, over)
}

// TestPythonReaderOutOfMemory runs the Python reader's command line on a
// 21 MB envelope with too little memory: each command reports a LimitError
// in one line and exits 1, never with a traceback.
func TestPythonReaderOutOfMemory(t *testing.T) {
	py := python(t)
	contrib, err := filepath.Abs("../../contrib/python")
	require.NoError(t, err)
	dir := t.TempDir()
	var doc []byte
	for _, f := range corpus.Hostile() {
		if f.Name == "utf8_huge_string" {
			_, doc, err = newBuilder(t, nil).Build(context.Background(), envelope.Input{Payload: f.Generate(memorySize).Data,
				IdempotencyKey: "idem:v1:limit"})
			require.NoError(t, err)
		}
	}
	require.NotNil(t, doc)
	p := filepath.Join(dir, "envelope.json")
	require.NoError(t, os.WriteFile(p, doc, 0o600))
	manifest := filepath.Join(dir, "manifest.jsonl")
	require.NoError(t, os.WriteFile(manifest, []byte(`{"name":"big","path":"`+p+`"}`+"\n"), 0o600))

	for _, tc := range []struct {
		name   string
		budget int // MiB
		args   []string
		status int
		want   string // in standard output or error
	}{
		// 30 MiB: the file is read, reading the envelope runs out.
		{"validate", 30, []string{"validate", p}, 1, "out of memory reading an envelope of"},
		{"restore", 30, []string{"restore", p, "-o", filepath.Join(dir, "out")}, 1, "out of memory reading an envelope of"},
		{"batch", 30, []string{"batch", manifest}, 0, `"verdict": "limit"`},
		// 8 MiB: not even the file can be read.
		{"validate, file", 8, []string{"validate", p}, 1, "out of memory reading " + p},
		{"batch, file", 8, []string{"batch", manifest}, 0, `"verdict": "limit"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(py, append([]string{"-c", limitScript, fmt.Sprint(tc.budget)}, tc.args...)...)
			cmd.Dir = contrib
			cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			status := 0
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				status = exit.ExitCode()
			} else {
				require.NoError(t, err)
			}
			all := stdout.String() + stderr.String()
			require.NotContains(t, all, "Traceback", all)
			require.NotContains(t, all, "MemoryError", all)
			require.Equal(t, tc.status, status, all)
			require.Contains(t, all, tc.want)
			require.LessOrEqual(t, strings.Count(strings.TrimSpace(all), "\n"), 0, "one line: %s", all)
		})
	}
	// With room, the same commands succeed.
	cmd := exec.Command(py, "-c", limitScript, "512", "validate", p)
	cmd.Dir = contrib
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	require.Equal(t, p+": ok\n", string(out))
}
