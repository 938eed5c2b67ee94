package benchcorpus

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Ensure returns the path of the corpus for a benchmark: the file named
// by GEODLQ_BENCH_CORPUS, or the one scripts/bench-corpus.sh generates
// (and caches) from world-atlas. It fails tb, with the script's output,
// when the corpus cannot be made (no npm, no network for the first
// install).
func Ensure(tb testing.TB) string {
	tb.Helper()
	if p := os.Getenv("GEODLQ_BENCH_CORPUS"); p != "" {
		if _, err := os.Stat(p); err != nil {
			tb.Fatalf("GEODLQ_BENCH_CORPUS: %v", err)
		}
		return p
	}
	script := filepath.Join(RepoRoot(tb), "scripts", "bench-corpus.sh")
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(script)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		tb.Fatalf("%s: %v\n%s", script, err, stderr.String())
	}
	return strings.TrimSpace(stdout.String())
}

// Load returns the corpus's events, one per non-blank line.
func Load(tb testing.TB, path string) [][]byte {
	tb.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	var events [][]byte
	for line := range bytes.SplitSeq(data, []byte{'\n'}) {
		if len(bytes.TrimSpace(line)) > 0 {
			events = append(events, line)
		}
	}
	if len(events) == 0 {
		tb.Fatalf("%s holds no events", path)
	}
	return events
}

// RepoRoot returns the repository's root directory, found from this
// source file's location.
func RepoRoot(tb testing.TB) string {
	tb.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		tb.Fatal("benchcorpus: cannot locate the repository")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Python returns the interpreter of the shapely baseline: GEODLQ_PYTHON,
// else Debian's /usr/bin/python3 (where apt's python3-shapely installs),
// else python3 on PATH. It fails tb when that interpreter cannot import
// shapely, saying how to install it.
func Python(tb testing.TB) string {
	tb.Helper()
	py := os.Getenv("GEODLQ_PYTHON")
	if py == "" {
		py = "/usr/bin/python3"
		if _, err := os.Stat(py); err != nil {
			py = "python3"
		}
	}
	out, err := exec.Command(py, "-c", "import shapely.geometry, shapely.validation, shapely.geos; print(shapely.__version__, shapely.geos.geos_version_string)").CombinedOutput()
	if err != nil {
		tb.Fatalf("%s cannot import shapely (apt-get install python3-shapely, or make bench-corpus, which installs it): %v\n%s", py, err, out)
	}
	return py
}

// PythonScript returns the path of scripts/shapely-baseline.py.
func PythonScript(tb testing.TB) string {
	tb.Helper()
	return filepath.Join(RepoRoot(tb), "scripts", "shapely-baseline.py")
}

// PythonPasses runs the shapely baseline over the corpus at path, passes
// times over the events held in memory, and returns the time the passes
// took, as the script measured it (interpreter start-up and reading the
// file excluded), and how many events it found invalid.
func PythonPasses(tb testing.TB, path string, passes int) (elapsed time.Duration, invalid int) {
	tb.Helper()
	py := Python(tb)
	cmd := exec.Command(py, PythonScript(tb), "--passes", fmt.Sprint(passes), path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("shapely baseline: %v\n%s", err, stderr.String())
	}
	var r struct {
		Seconds float64 `json:"seconds"`
		Invalid int     `json:"invalid"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		tb.Fatalf("shapely baseline printed %q: %v", out, err)
	}
	return time.Duration(r.Seconds * float64(time.Second)), r.Invalid
}
