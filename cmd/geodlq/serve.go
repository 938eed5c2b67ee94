package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/geodlq/geodlq/broker"
	_ "github.com/geodlq/geodlq/broker/kafka"       // kafka://
	_ "github.com/geodlq/geodlq/broker/postgis"     // postgres://
	_ "github.com/geodlq/geodlq/broker/redisstream" // redis://
	_ "github.com/geodlq/geodlq/broker/sqlite"      // sqlite://
	"github.com/geodlq/geodlq/cmd/geodlq/internal/console"
	"github.com/geodlq/geodlq/offload"
	_ "github.com/geodlq/geodlq/offload/blobstore" // s3://, …
	"github.com/geodlq/geodlq/spatial"
)

type serveOptions struct {
	addr         string
	readOnly     bool
	tokenFile    string
	targets      []string
	tiles        string
	tilesAttrib  string
	expectedEPSG int
	poll         time.Duration
	// sourcePointer is --source-pointer.
	sourcePointer string
}

func newServeCmd(a *app) *cobra.Command {
	var o serveOptions
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Open the operator console: dead letters on a map, explained, replayed or discarded safely",
		Long: `serve runs the operator console on --addr (loopback by default): a web page,
embedded in the binary and working offline, that shows the dead letters of
--store on a map (the newest 5,000 matching the filters; its fault point, else
its geometry's centroid; geometries in another CRS reprojected with PROJ),
clustered, coloured by class; counts by
destination, class, stage, EPSG and reason kind, failures over time and the top
source prefixes; a filtered, paged list; each record's envelope, its geometry
with the fault marked (both crossing segments of a self-intersection), the
restored payload (hash-verified) and a repair preview; and new dead letters as
they arrive. The JSON API behind it is described at /api/openapi.json.

The console is read-only unless it has a token. --read-only=false enables
replay and discard, with the token from --token-file or $GEODLQ_TOKEN (at
least 16 characters), or a random one printed with the URL when neither is
given. Every action takes the token (the page reads it from the URL's #token=
fragment, which browsers never send), runs a dry run first, and carries out
only what that dry run showed once confirmed — replays through the same
replayer as geodlq replay (restore, verify, repair, check, re-inject with the
original idempotency key, acknowledge only then), discards through the same
purge as geodlq purge.

Examples:
  geodlq serve --store sqlite://./geodlq.db --blobs file://./geodlq-blobs
  GEODLQ_TOKEN=$(cat /run/secrets/geodlq) geodlq serve --read-only=false --store postgres://…`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("read-only") && (o.tokenFile != "" || os.Getenv("GEODLQ_TOKEN") != "") {
				o.readOnly = false // a token means actions
			}
			return a.serve(cmd.Context(), o)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8080", "address to listen on (a non-loopback address exposes the console to the network)")
	fs.BoolVar(&o.readOnly, "read-only", true, "refuse replays and discards (--read-only=false needs a token: --token-file, $GEODLQ_TOKEN, or a random one)")
	fs.StringVar(&o.tokenFile, "token-file", "", "file holding the token that enables actions ($GEODLQ_TOKEN)")
	fs.StringArrayVar(&o.targets, "target", nil, "store or broker URL replays may re-inject into, chosen per replay (repeat for several; the first is the default). "+
		"The store itself is always a choice, for the records its own broker delivered")
	fs.StringVar(&o.tiles, "tiles", "", "XYZ tile URL drawn under the offline basemap, e.g. https://tiles.example/{z}/{x}/{y}.png")
	fs.StringVar(&o.tilesAttrib, "tiles-attribution", "", "attribution text for --tiles")
	fs.IntVar(&o.expectedEPSG, "expected-epsg", spatial.DefaultExpectedEPSG, "EPSG code the consumer expects (replay check and reproject target)")
	fs.DurationVar(&o.poll, "poll", 2*time.Second, "how often to look for new dead letters")
	fs.StringVar(&o.sourcePointer, "source-pointer", "", "JSON pointer to the event's source, for the Source column, the source filter and the overview's source groups (default /source_uri; /properties/provider)")
	return cmd
}

// token returns the token that enables actions, and whether it was made
// up here (and so must be shown to the operator).
func (o serveOptions) token() (string, bool, error) {
	if o.readOnly {
		return "", false, nil
	}
	if o.tokenFile != "" {
		b, err := os.ReadFile(o.tokenFile)
		if err != nil {
			return "", false, fmt.Errorf("--token-file: %w", err)
		}
		t := strings.TrimSpace(string(b))
		if len(t) < console.MinTokenLen {
			return "", false, usagef("--token-file %s: the token must be at least %d characters", o.tokenFile, console.MinTokenLen)
		}
		return t, false, nil
	}
	if t := strings.TrimSpace(os.Getenv("GEODLQ_TOKEN")); t != "" {
		if len(t) < console.MinTokenLen {
			return "", false, usagef("$GEODLQ_TOKEN: the token must be at least %d characters", console.MinTokenLen)
		}
		return t, false, nil
	}
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", false, err
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), true, nil
}

func (a *app) serve(ctx context.Context, o serveOptions) (err error) {
	if o.poll < 100*time.Millisecond {
		return usagef("--poll must be at least 100ms")
	}
	if err := checkSourcePointer(o.sourcePointer); err != nil {
		return usagef("%v", err)
	}
	token, made, err := o.token()
	if err != nil {
		return err
	}
	log := a.logger()
	store, err := broker.OpenStore(ctx, a.storeURL, &broker.OpenOptions{ReadOnly: token == "", Store: broker.StoreOptions{Logger: log}})
	if err != nil {
		return err
	}
	defer closeWith(&err, store)
	if _, err := store.Destinations(ctx); errors.Is(err, errors.ErrUnsupported) {
		return fmt.Errorf("the console reads records without leasing them, which this store (%s) cannot do: %w", store.Name(), err)
	} else if err != nil {
		return err
	}
	opts := console.Options{Store: store, Label: broker.Redact(a.storeURL), Token: token, TileURL: o.tiles,
		TileAttribution: o.tilesAttrib, ExpectedEPSG: o.expectedEPSG, Poll: o.poll, Logger: log,
		SourcePointer: o.sourcePointer}
	if len(o.targets) > 0 && token == "" {
		return usagef("--target is for replays, which a read-only console does not run")
	}
	for _, u := range o.targets {
		t, err := broker.OpenStore(ctx, u, &broker.OpenOptions{Create: true, Store: broker.StoreOptions{Logger: log}})
		if err != nil {
			return err
		}
		defer closeWith(&err, t)
		opts.Targets = append(opts.Targets, console.Target{Label: broker.Redact(u), Publisher: t})
	}
	if a.blobsURL != "" {
		bs, err := offload.OpenStore(ctx, a.blobsURL, &offload.OpenOptions{ReadOnly: true})
		if err != nil {
			return err
		}
		defer closeWith(&err, bs)
		if opts.Blobs, err = offload.New(bs, &offload.Options{BaseURI: a.blobsBase, Prefix: a.blobsPrefix}); err != nil {
			return fmt.Errorf("blobs %s: %w", a.blobsURL, err)
		}
	}
	srv, err := console.New(opts)
	if err != nil {
		return usagef("%v", err)
	}
	defer closeWith(&err, srv)

	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", o.addr, err)
	}
	hs := srv.HTTPServer(ctx) // timeouts for slow clients, per route
	url := "http://" + ln.Addr().String() + "/"
	mode := "read-only (start with --read-only=false and a token to replay or discard)"
	if token != "" {
		mode = "actions enabled: every replay and discard needs the token"
	}
	fmt.Fprintf(a.stderr, "geodlq console for %s, %s\n", broker.Redact(a.storeURL), mode)
	if made {
		fmt.Fprintf(a.stderr, "open %s#token=%s\n", url, token)
	} else {
		fmt.Fprintf(a.stderr, "open %s\n", url)
	}
	if host, _, _ := net.SplitHostPort(ln.Addr().String()); !net.ParseIP(host).IsLoopback() {
		fmt.Fprintf(a.stderr, "warning: %s is reachable from the network; the page and its API carry no authentication for reading\n", ln.Addr())
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = srv.Close() // stops event streams and jobs first, so Shutdown does not wait for them
	if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	fmt.Fprintln(a.stderr, "geodlq console stopped")
	return nil
}
