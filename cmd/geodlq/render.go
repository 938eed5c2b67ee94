package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/paulmach/orb"
	"github.com/spf13/cobra"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/cmd/geodlq/internal/drawing"
	"github.com/geodlq/geodlq/internal/geojson"
	"github.com/geodlq/geodlq/offload"
)

// svgConverter is the program --png runs: Debian's librsvg2-bin.
const svgConverter = "rsvg-convert"

func newRenderCmd(a *app) *cobra.Command {
	var out string
	var png bool
	var width, height int
	cmd := &cobra.Command{
		Use:   "render ID -o FILE.svg",
		Short: "Draw a record's geometry with the offending vertex or segment marked",
		Long: `render draws the geometry of a record (named by record id, DEST/ID or event id)
as SVG: polygons filled, every vertex dotted, the offending vertex circled or
the offending segment drawn thick in red with its vertex indexes, the error
location crossed, and the reason, location and part/ring/vertex as a caption.
Offloaded geometries are fetched from --blobs and verified.

--png (or an output name ending in .png) converts the SVG with rsvg-convert
(Debian: apt-get install librsvg2-bin); without it, render says so and fails.
-o - writes the SVG to standard output.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			if out == "" {
				return usagef("render needs -o FILE.svg (or -o - for standard output)")
			}
			png = png || strings.HasSuffix(strings.ToLower(out), ".png")
			if png && out == "-" {
				return usagef("--png needs an output file")
			}
			conv := ""
			if png {
				if conv, err = exec.LookPath(svgConverter); err != nil {
					return fmt.Errorf("--png needs %s, which is not installed (Debian: apt-get install librsvg2-bin); write an SVG instead with -o FILE.svg", svgConverter)
				}
			}
			ctx := cmd.Context()
			s, err := a.openStore(ctx, false)
			if err != nil {
				return err
			}
			defer closeWith(&err, s)
			it, err := a.findRecord(ctx, s, args[0])
			if err != nil {
				return err
			}
			if it.env == nil {
				return problems("record %s/%s is not a dead-letter envelope; nothing to draw", it.Record.Destination, it.Record.ID)
			}
			off, closeBlobs, err := a.openBlobs(ctx, false)
			if err != nil {
				return err
			}
			defer closeBlobs()
			var svg bytes.Buffer
			if err := renderSVG(ctx, &svg, it, off, width, height); err != nil {
				return err
			}
			switch {
			case out == "-":
				_, err = a.stdout.Write(svg.Bytes())
				return err
			case png:
				c := exec.CommandContext(ctx, conv, "-f", "png", "-o", out)
				c.Stdin = &svg
				if msg, err := c.CombinedOutput(); err != nil {
					return fmt.Errorf("%s: %v: %s", svgConverter, err, bytes.TrimSpace(msg))
				}
			default:
				if err := os.WriteFile(out, svg.Bytes(), 0o644); err != nil {
					return err
				}
			}
			if !a.json {
				fmt.Fprintf(a.stderr, "wrote %s\n", out)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "output file (.svg, or .png with --png); - for standard output")
	cmd.Flags().BoolVar(&png, "png", false, "write PNG (needs rsvg-convert)")
	cmd.Flags().IntVar(&width, "width", 640, "drawing width in pixels")
	cmd.Flags().IntVar(&height, "height", 480, "drawing height in pixels")
	return cmd
}

// renderSVG draws it's geometry to w.
func renderSVG(ctx context.Context, w *bytes.Buffer, it item, off *offload.Offloader, width, height int) error {
	e := it.env
	g := e.Geometry
	if g.Missing {
		return problems("event %s has no geometry to draw (%s)", e.EventID, e.ErrorMessage)
	}
	data := g.Inline
	if g.OffloadURI != "" {
		if off == nil {
			return &usageError{fmt.Errorf("the geometry is offloaded to %s; pass --blobs", g.OffloadURI)}
		}
		var err error
		if data, err = off.Fetch(ctx, offload.Ref{URI: g.OffloadURI, Size: g.ByteSize, SHA256: g.ContentSHA256}); err != nil {
			return restoreError(err)
		}
	}
	geom, err := geojson.ParseGeometry(data, geojson.Limits{MaxVertices: -1})
	if err != nil {
		return problems("cannot draw the geometry of %s: %v", e.EventID, err)
	}
	var m drawing.Mark
	v := viewOf(it)
	reason := e.ErrorMessage
	if ge := e.GeometryError; ge != nil {
		if len(ge.Location) == 2 {
			m.Location = &orb.Point{ge.Location[0], ge.Location[1]}
		}
		m.Fault = ge.Fault
		if ge.Reason != "" {
			reason = ge.Reason
		}
	}
	caption := []string{
		fmt.Sprintf("%s · %s at %s · EPSG:%d", e.EventID, e.FailureClass, e.FailedStage, broker.EPSGOf(e)),
		clip(reason, 80),
	}
	if at := where(v.Location, v.Fault); at != "-" {
		caption = append(caption, "at "+at)
	}
	caption = append(caption, fmt.Sprintf("record %s/%s · %s, %d vertices", it.Record.Destination, it.Record.ID, geom.Geom.GeoJSONType(), geom.Vertices))
	return drawing.SVG(w, geom.Geom, m, drawing.Options{Width: width, Height: height, Title: e.EventID + ": " + reason, Caption: caption})
}
