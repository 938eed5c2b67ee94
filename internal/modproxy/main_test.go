package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func git(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "git %v: %s", args, out)
}

func write(t *testing.T, path, content string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
}

// TestServesCommittedModules makes a repository of two modules (the
// second nested in the first and requiring it), serves both at v1.2.3,
// and builds a fresh module against the proxy alone: the go command
// accepts the layout, and the zips hold the committed files only (an
// uncommitted file that does not compile is left out).
func TestServesCommittedModules(t *testing.T) {
	repo := t.TempDir()
	write(t, filepath.Join(repo, "go.mod"), "module example.com/top\n\ngo 1.25.0\n")
	write(t, filepath.Join(repo, "top.go"), "package top\n\nconst Name = \"top\"\n")
	write(t, filepath.Join(repo, "sub", "go.mod"), "module example.com/top/sub\n\ngo 1.25.0\n\nrequire example.com/top v1.2.3\n")
	write(t, filepath.Join(repo, "sub", "sub.go"), "package sub\n\nimport \"example.com/top\"\n\nconst Name = top.Name + \"/sub\"\n")
	git(t, repo, "init", "-q")
	git(t, repo, "add", ".")
	git(t, repo, "commit", "-q", "-m", "init")
	write(t, filepath.Join(repo, "uncommitted.go"), "package top\n\nthis does not compile\n")

	out := t.TempDir()
	require.NoError(t, run(repo, "HEAD", "v1.2.3", out, []string{".", "sub"}))
	for _, f := range []string{"example.com/top/@v/list", "example.com/top/@v/v1.2.3.zip", "example.com/top/sub/@v/v1.2.3.info", "example.com/top/sub/@v/v1.2.3.mod"} {
		require.FileExists(t, filepath.Join(out, f))
	}

	user := t.TempDir()
	write(t, filepath.Join(user, "go.mod"), "module example.com/user\n\ngo 1.25.0\n")
	write(t, filepath.Join(user, "main.go"), "package main\n\nimport \"example.com/top/sub\"\n\nfunc main() { println(sub.Name) }\n")
	modcache := t.TempDir()
	gocmd := func(args ...string) string {
		cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), args...)
		cmd.Dir = user
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod -modcacherw", "GOPROXY=file://"+filepath.ToSlash(out),
			"GONOSUMDB=example.com", "GONOSUMCHECK=1", "GOMODCACHE="+modcache, "GOTOOLCHAIN=local")
		b, err := cmd.CombinedOutput()
		require.NoError(t, err, "go %v: %s", args, b)
		return string(b)
	}
	gocmd("get", "example.com/top/sub@v1.2.3")
	require.True(t, strings.HasSuffix(gocmd("run", "."), "top/sub\n"), "the module built from the proxy runs")
	require.Contains(t, gocmd("list", "-m", "all"), "example.com/top v1.2.3")

	require.Error(t, run(repo, "HEAD", "1.2.3", out, []string{"."}), "a version without v")
	require.Error(t, run(repo, "HEAD", "v1.2", out, []string{"."}), "a non-canonical version")
	require.Error(t, run(repo, "HEAD", "v1.2.3", out, []string{"missing"}), "a directory without go.mod")
	require.Error(t, run(repo, "HEAD", "v1.2.3", "", []string{"."}), "no output directory")
}
