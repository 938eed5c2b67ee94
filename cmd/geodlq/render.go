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
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/cmd/geodlq/internal/drawing"
	"github.com/geodlq/geodlq/internal/geojson"
	"github.com/geodlq/geodlq/offload"
)

// svgConverter is the program --png runs: Debian's librsvg2-bin.
const svgConverter = "rsvg-convert"

func newRenderCmd(a *app) *cobra.Command {
	var png bool
	var width, height int
	var out *output
	cmd := &cobra.Command{
		Use:   "render ID [FILE.svg|FILE.png|-]",
		Short: "Draw a record's geometry with its faults marked",
		Long: `render draws the geometry of a record (named by record id, DEST/ID or event id)
as SVG, fitted to the geometry's extent with a scale bar and the corner
coordinates: polygons filled, vertices dotted, and the faults marked in red —
both crossing segments of a self-intersection, the vertex of a NaN or infinite
coordinate, an unclosed ring's missing closing segment (dashed), positions out
of range, and the error location crossed — with the reason, location and
part/ring/vertex as a caption, wrapped. Offloaded geometries are fetched from
--blobs and verified.

FILE ending in .png (or --png) is converted with rsvg-convert (Debian:
apt-get install librsvg2-bin). "-", or no FILE when standard output is not a
terminal, writes the SVG to standard output. The file is written under a
temporary name and renamed when complete.`,
		Args: rangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			if err := out.resolve(a, cmd); err != nil {
				return err
			}
			file := "-"
			if len(args) == 2 {
				file = args[1]
			} else if a.tty {
				return usageFor(cmd, "name the picture's file: geodlq render %s FILE.svg (or FILE.png, or - for standard output)", args[0])
			}
			png = png || strings.HasSuffix(strings.ToLower(file), ".png")
			if png && file == "-" {
				return usageFor(cmd, "--png needs an output file")
			}
			if width < 64 || width > 16384 || height != 0 && (height < 64 || height > 16384) {
				return usageFor(cmd, "--width and --height must be 64 to 16384 pixels")
			}
			conv := ""
			if png {
				if conv, err = exec.LookPath(svgConverter); err != nil {
					return fmt.Errorf("PNG output needs %s, which is not installed (Debian: apt-get install librsvg2-bin); write an SVG instead", svgConverter)
				}
			}
			ctx := cmd.Context()
			s, err := a.openStore(ctx, readOnly)
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
			off, closeBlobs, err := a.openBlobs(ctx, readOnly)
			if err != nil {
				return err
			}
			defer closeBlobs()
			var svg bytes.Buffer
			if err := renderSVG(ctx, &svg, it, off, width, height); err != nil {
				return err
			}
			switch {
			case file == "-":
				_, err = a.stdout.Write(svg.Bytes())
				return err
			case png:
				err = writeFileAtomic(file, func(tmp string) error {
					c := exec.CommandContext(ctx, conv, "-f", "png", "-o", tmp)
					c.Stdin = &svg
					if msg, err := c.CombinedOutput(); err != nil {
						return fmt.Errorf("%s: %v: %s", svgConverter, err, bytes.TrimSpace(msg))
					}
					return nil
				})
			default:
				err = writeFileAtomic(file, func(tmp string) error { return os.WriteFile(tmp, svg.Bytes(), 0o644) })
			}
			if err != nil {
				return err
			}
			if out.json() {
				return writeJSON(a.stdout, map[string]string{"file": file, "record": it.Record.Destination + "/" + it.Record.ID})
			}
			fmt.Fprintf(a.stderr, "wrote %s\n", file)
			return nil
		},
	}
	cmd.Flags().BoolVar(&png, "png", false, "write PNG (needs rsvg-convert); implied by a FILE ending in .png")
	cmd.Flags().IntVar(&width, "width", 640, "drawing width in pixels")
	cmd.Flags().IntVar(&height, "height", 0, "drawing height in pixels (0: from the geometry's aspect ratio)")
	out = addOutput(cmd, fmtTable, fmtJSON)
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
			return &usageError{err: fmt.Errorf("the geometry is offloaded to %s; pass --blobs", g.OffloadURI)}
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
	v := viewOf(it, "")
	reason := e.ErrorMessage
	epsg := broker.EPSGOf(e)
	if ge := e.GeometryError; ge != nil {
		if len(ge.Location) == 2 {
			m.Location = &orb.Point{ge.Location[0], ge.Location[1]}
		}
		m.Fault = ge.Fault
		m.Kind = classify.ReasonKind(ge.Kind)
		if ge.Reason != "" {
			reason = ge.Reason
		}
	}
	unit := "units"
	switch epsg {
	case 4326:
		unit = "°"
		m.Range = &orb.Bound{Min: orb.Point{-180, -90}, Max: orb.Point{180, 90}}
	case 3857:
		unit = "m"
	}
	crs := "no EPSG code"
	if epsg != 0 {
		crs = fmt.Sprintf("EPSG:%d", epsg)
	}
	caption := []string{
		fmt.Sprintf("%s · %s at %s · %s", e.EventID, e.FailureClass, e.FailedStage, crs),
		reason,
	}
	if at := where(v.Location, v.Fault); at != "-" {
		caption = append(caption, "at "+at)
	}
	caption = append(caption, fmt.Sprintf("record %s/%s · %s, %d vertices", it.Record.Destination, it.Record.ID, geom.Geom.GeoJSONType(), geom.Vertices))
	return drawing.SVG(w, geom.Geom, m, drawing.Options{Width: width, Height: height, Title: e.EventID + ": " + reason, Caption: caption, Unit: unit})
}
