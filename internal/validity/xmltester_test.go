//go:build cgo

package validity_test

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paulmach/orb/encoding/wkb"

	"github.com/geodlq/geodlq/internal/geojson"
)

// The isValid cases of GEOS's own test suite (the xmltester files), as a
// fixture of geodlq's: each case's geometry converted to GeoJSON, with the
// reason GEOS 3.11.1 gave for it when the fixture was made. See
// testdata/README.md for where the geometries come from and their licence.
//
// Regenerate from a checkout of GEOS 3.11.1's sources with
//
//	go test ./internal/validity -run TestXMLTesterFixture \
//	  -update-xmltester /path/to/geos/tests/xmltester/tests

var updateXMLTester = flag.String("update-xmltester", "", "regenerate testdata/geos-xmltester.jsonl from GEOS's tests/xmltester/tests `dir`")

const xmlFixture = "testdata/geos-xmltester.jsonl"

// fixtureCase is one line of the fixture.
type fixtureCase struct {
	// Case names the xmltester file, case number (from 1) and argument.
	Case string `json:"case"`
	// Desc is the case's description in the xmltester file.
	Desc string `json:"desc"`
	// Expect is the xmltester file's isValid expectation.
	Expect bool `json:"xmltester_valid"`
	// Geometry is the case's geometry as GeoJSON.
	Geometry json.RawMessage `json:"geometry"`
	// GEOS is GEOSisValidReason_r's answer when the fixture was made.
	GEOS string `json:"geos"`
}

func TestXMLTesterFixture(t *testing.T) {
	if *updateXMLTester != "" {
		writeXMLFixture(t, *updateXMLTester)
	}
	data, err := os.ReadFile(xmlFixture)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	kinds := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var c fixtureCase
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatal(err)
		}
		g, ok := parse(c.Geometry)
		if !ok {
			t.Fatalf("%s: the fixture's geometry does not reach the engines", c.Case)
		}
		got := engine(g)
		if got != c.GEOS {
			t.Errorf("%s (%s): the engine says %q, GEOS said %q", c.Case, c.Desc, got, c.GEOS)
		}
		if live := oracle(g); live != c.GEOS {
			t.Errorf("%s: GEOS now says %q, the fixture %q", c.Case, live, c.GEOS)
		}
		kinds[reasonKind(c.GEOS)]++
		n++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 500 {
		t.Fatalf("the fixture has %d cases", n)
	}
	t.Logf("%d cases: %v", n, kinds)
}

// xmlRun is the part of an xmltester file the fixture reads.
type xmlRun struct {
	Cases []struct {
		Desc  string `xml:"desc"`
		A     string `xml:"a"`
		B     string `xml:"b"`
		Tests []struct {
			Op struct {
				Name  string `xml:"name,attr"`
				Arg1  string `xml:"arg1,attr"`
				Value string `xml:",chardata"`
			} `xml:"op"`
		} `xml:"test"`
	} `xml:"case"`
}

// writeXMLFixture converts every isValid case under dir whose geometry
// GeoJSON can carry and geodlq's parser hands to the engines.
func writeXMLFixture(t *testing.T, dir string) {
	var out bytes.Buffer
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".xml") {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	kept, dropped := 0, 0
	for _, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(data, []byte(`"isValid"`)) {
			continue
		}
		var run xmlRun
		if err := xml.Unmarshal(data, &run); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		rel, _ := filepath.Rel(dir, path)
		for i, c := range run.Cases {
			for _, test := range c.Tests {
				if test.Op.Name != "isValid" {
					continue
				}
				src := c.A
				if strings.EqualFold(test.Op.Arg1, "B") {
					src = c.B
				}
				gj, ok := toGeoJSON(strings.TrimSpace(src))
				if !ok {
					dropped++
					continue
				}
				g, ok := parse(gj)
				if !ok || seen[string(gj)] {
					dropped++
					continue
				}
				seen[string(gj)] = true
				line, err := json.Marshal(fixtureCase{
					Case:     fmt.Sprintf("%s:%d:%s", filepath.ToSlash(rel), i+1, strings.ToLower(test.Op.Arg1)),
					Desc:     strings.Join(strings.Fields(c.Desc), " "),
					Expect:   strings.TrimSpace(test.Op.Value) == "true",
					Geometry: gj,
					GEOS:     oracle(g),
				})
				if err != nil {
					t.Fatal(err)
				}
				out.Write(line)
				out.WriteByte('\n')
				kept++
			}
		}
	}
	t.Logf("kept %d cases, dropped %d (empty, not representable in GeoJSON, refused before the engines, or repeated)", kept, dropped)
	if err := os.WriteFile(xmlFixture+".tmp", out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(xmlFixture+".tmp", xmlFixture); err != nil {
		t.Fatal(err)
	}
}

// toGeoJSON reads WKT or hex WKB with GEOS and writes the geometry (two
// dimensions) as GeoJSON.
func toGeoJSON(src string) (gj []byte, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	var raw []byte
	if b, err := hex.DecodeString(src); err == nil && len(b) > 0 {
		geom, err := geosCtx.NewGeomFromWKB(b)
		if err != nil {
			return nil, false
		}
		raw = geom.ToWKB()
		geom.Destroy()
	} else {
		geom, err := geosCtx.NewGeomFromWKT(src)
		if err != nil {
			return nil, false
		}
		raw = geom.ToWKB()
		geom.Destroy()
	}
	g, err := wkb.Unmarshal(raw)
	if err != nil {
		return nil, false
	}
	out, err := geojson.Append(nil, g, nil)
	if err != nil {
		return nil, false
	}
	return out, true
}
