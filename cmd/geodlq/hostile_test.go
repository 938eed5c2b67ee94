package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/internal/corpus"
	"github.com/geodlq/geodlq/internal/hostiletest"
)

// hostileSize is the size the scaling families are generated at: 1 MiB,
// so that the command's whole run stays within CI's budget (the library's
// own hostile tests, internal/hostiletest, run them at 32 MiB);
// GEODLQ_HOSTILE_SIZE=33554432 runs them here at that size too. The
// families that do not scale (a million-position ring, 10^5 holes) run at
// their own size either way.
func hostileSize() int {
	if n, err := strconv.Atoi(os.Getenv("GEODLQ_HOSTILE_SIZE")); err == nil && n > 0 {
		return n
	}
	return 1 << 20
}

// baselineRSS is the peak RSS of the command doing nothing much (its
// help): the binary's own pages — about 80 MB of a 120 MB binary that
// links every store's and cloud's client, GEOS and PROJ — which the memory
// an input costs comes on top of.
func baselineRSS(t *testing.T) int64 {
	t.Helper()
	cmd := exec.Command(binary, "--help")
	peak := measured(t, cmd)
	require.NoError(t, cmd.Run())
	return peak()
}

// hostileRun runs geodlq once on hostile input under a deadline and
// checks what issue 9 asks of every command: no panic, no fatal error, no
// hang, an exit code the command documents, and memory bounded: a peak RSS
// of at most base (the binary's own, see baselineRSS) plus
// hostiletest.Budget(input), 4× the input plus 64 MiB.
//
// input < 0 checks everything but memory: a run that writes to the store
// (check --dead-letter) maps the store's pages, which grow with what the
// store already holds, not with the input.
func hostileRun(t *testing.T, c cli, base int64, input int, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, append(c.base(), args...)...)
	peak := measured(t, cmd) // the command's pages alone, with or without -race here
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	require.NoError(t, ctx.Err(), "geodlq %v did not finish within 2 minutes (hang)", args)
	r := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("geodlq %v: %v", args, err)
	}
	require.NotContains(t, r.stderr, "panic:", "geodlq %v", args)
	require.NotContains(t, r.stderr, "fatal error:", "geodlq %v", args)
	require.NotContains(t, r.stderr, "goroutine ", "geodlq %v", args)
	require.Contains(t, []int{exitOK, exitProblems, exitUsage, exitStore}, r.code, "geodlq %v: %s", args, r.stderr)
	if input < 0 {
		return r
	}
	p := peak()
	require.LessOrEqual(t, p, base+hostiletest.Budget(input), "geodlq %v: peak RSS %d MiB (the binary alone: %d MiB) for %d bytes of input",
		args, p>>20, base>>20, input)
	return r
}

// TestHostileCorpus feeds the hostile-input corpus (internal/corpus,
// 100+ families) to the command: every event family through check (and
// its --dead-letter path, so that the store then holds envelopes the
// real builder made of them), every forged-envelope family into the
// store, and then every record through show and render, and the whole
// store through export (GeoJSON, GeoPackage) and triage --dry-run.
func TestHostileCorpus(t *testing.T) {
	t.Parallel()
	size := hostileSize()
	dir := fastDir(t)
	blobs := filepath.Join(dir, "blobs")
	c := cli{t: t, store: "sqlite://" + filepath.Join(dir, "dlq.db"), blobs: "file://" + blobs}
	largest := 0
	base := baselineRSS(t)
	for _, f := range corpus.Hostile() {
		s := f.Generate(size)
		n := len(s.Data)
		largest = max(largest, n)
		switch f.Input {
		case corpus.InputEvent:
			in := filepath.Join(dir, f.Name+".in")
			require.NoError(t, os.WriteFile(in, s.Data, 0o644))
			oneLine := !strings.ContainsAny(strings.TrimSpace(string(s.Data)), "\n")
			s = corpus.Sample{}
			r := hostileRun(t, c, base, n, "check", "-o", "json", in)
			hostileRun(t, c, base, -1, "check", "-o", "json", "--dead-letter", "hostile", in)
			if f.Valid() && oneLine {
				require.Equal(t, exitOK, r.code, "%s must pass: %s", f.Name, r.stdout)
			} else if !f.Valid() && r.code == exitProblems {
				var rep struct {
					Events []verdict `json:"events"`
				}
				require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), f.Name)
				require.NotEmpty(t, rep.Events)
				if len(rep.Events) == 1 {
					require.Equal(t, f.Class.String(), rep.Events[0].FailureClass, "%s: the documented verdict", f.Name)
				}
			}
			require.NoError(t, os.Remove(in))
		case corpus.InputEnvelope:
			for k, b := range s.Blobs {
				p := filepath.Join(blobs, filepath.FromSlash(k))
				require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o750))
				require.NoError(t, os.WriteFile(p, b, 0o640))
			}
			st, err := broker.OpenStore(context.Background(), c.store, &broker.OpenOptions{Create: true})
			require.NoError(t, err)
			err = st.Publish(context.Background(), "forged.poison.dlt", &broker.Message{Body: s.Data})
			require.NoError(t, st.Close())
			if err != nil {
				require.ErrorAs(t, err, new(*classify.TooLargeError), "%s", f.Name) // over the store's size limit: refused whole
			}
		}
	}

	c.blobs = "file://" + blobs
	forged := c
	forged.env = append(forged.env, "GEODLQ_BLOBS_BASE="+corpus.HostileBaseURI)
	views := listViews(t, c, "--dest", "hostile.poison.dlt,hostile.retry.dlt,forged.poison.dlt")
	require.NotEmpty(t, views)
	for _, v := range views {
		ref := v.Destination + "/" + v.ID
		cc := c
		if v.Destination == "forged.poison.dlt" {
			cc = forged
		}
		hostileRun(t, cc, base, largest, "show", "-o", "json", ref)
		hostileRun(t, cc, base, largest, "render", ref, filepath.Join(dir, "out.svg"))
	}
	// The whole store is the input of export and triage.
	total := 0
	require.NoError(t, filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			fi, err := d.Info()
			if err == nil {
				total += int(fi.Size())
			}
		}
		return err
	}))
	for _, cc := range []cli{c, forged} {
		hostileRun(t, cc, base, total, "export", filepath.Join(dir, "all.geojson"))
		hostileRun(t, cc, base, total, "export", filepath.Join(dir, "all.gpkg"))
		hostileRun(t, cc, base, total, "triage", "--dry-run", "--target", cc.store, "-o", "json")
	}
}
