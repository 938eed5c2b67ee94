package contracttest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/corpus"
)

// hostileSize is the size the hostile families that scale are generated
// at here: large enough for each to be what it claims (nesting beyond
// encoding/json's 10,000 levels, long, many), small enough to run the
// Python reader over all of them in every mode.
const hostileSize = 32 << 10

// hostileBuilt builds, with build, the envelopes of every hostile event
// family (internal/corpus Hostile), in every mode.
func hostileBuilt(t testing.TB, build func(mode, name string, in envelope.Input)) {
	t.Helper()
	srcs := sources()
	for i, f := range corpus.Hostile() {
		if f.Input != corpus.InputEvent {
			continue
		}
		payload := f.Generate(hostileSize).Data
		for _, m := range modes {
			build(m.name, "hostile/"+f.Name, envelope.Input{Payload: payload, Err: rotatingErrors[i%len(rotatingErrors)],
				Source: srcs[i%len(srcs)]})
		}
	}
}

// hostileForged returns the hostile corpus's forged envelopes, with their
// blobs in a store under corpus.HostileBaseURI, each checked against the
// verdict the corpus expects of Decode and Restore.
func hostileForged(t testing.TB) []document {
	t.Helper()
	var docs []document
	for _, f := range corpus.Hostile() {
		if f.Input != corpus.InputEnvelope {
			continue
		}
		s := f.Generate(hostileSize)
		// A store of its own: the families tamper with blobs of the same
		// name.
		bs := newBlobStore(t, corpus.HostileBaseURI, 0)
		for key, blob := range s.Blobs {
			require.True(t, filepath.IsLocal(key), key)
			p := filepath.Join(bs.dir, filepath.FromSlash(key))
			require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o750))
			require.NoError(t, os.WriteFile(p, blob, 0o600))
		}
		f := f
		docs = append(docs, document{name: "hostile-forged/" + f.Name, data: s.Data, store: bs,
			hostile: func(t testing.TB, dv verdict, vs []envelope.Violation) {
				env, err := envelope.Decode(s.Data)
				if f.DecodeErr != nil {
					require.ErrorIs(t, err, f.DecodeErr, f.Name)
					return
				}
				require.NoError(t, err, f.Name)
				require.Equal(t, accepted, dv)
				_, err = env.Restore(context.Background(), bs.off)
				if f.RestoreErr != nil {
					require.ErrorIs(t, err, f.RestoreErr, f.Name)
				} else {
					require.NoError(t, err, f.Name)
				}
			}})
	}
	return docs
}
