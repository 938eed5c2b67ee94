//go:build cgo

package spatial_test

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/internal/corpus"
	"github.com/geodlq/geodlq/internal/epsg"
	"github.com/geodlq/geodlq/spatial"
	"github.com/geodlq/geodlq/spatial/proj"
)

// resolution is a CRS resolution: info, or the failure.
type resolution struct {
	info spatial.CRSInfo
	fail *spatial.CRSError
}

// projResolve is the oracle: PROJ's answer for a declared CRS.
func projResolve(t testing.TB, p *proj.PROJ, declared string) resolution {
	def, problem := spatial.NormalizeCRS(declared)
	if problem != "" {
		return resolution{fail: &spatial.CRSError{Definition: declared, Message: problem}}
	}
	info, err := p.ResolveCRS(def)
	if err == nil {
		return resolution{info: info}
	}
	var ce *spatial.CRSError
	require.ErrorAs(t, err, &ce, declared)
	ce.Definition = declared
	return resolution{fail: ce}
}

// aliasForms are the ways a producer may write EPSG:n.
func aliasForms(n int) []string {
	s := strconv.Itoa(n)
	return []string{
		"EPSG:" + s, "epsg:" + s, "Epsg:0" + s, " EPSG:" + s + " ",
		"urn:ogc:def:crs:EPSG::" + s, "urn:ogc:def:crs:EPSG:9.8.15:" + s, "urn:ogc:def:crs:epsg:" + s,
		"urn:x-ogc:def:crs:EPSG::" + s, "URN:OGC:DEF:CRS:EPSG::" + s, "urn:ogc:def:crs:EPSG:6.18.3:" + s,
		"http://www.opengis.net/def/crs/EPSG/0/" + s, "https://www.opengis.net/def/crs/EPSG/0/" + s,
		"http://www.opengis.net/def/crs/epsg/9.8/" + s,
	}
}

// ogcForms are the OGC CRSs and their spellings, resolved by the
// registry.
var ogcForms = []string{
	"OGC:CRS84", "OGC:CRS83", "OGC:CRS27", "CRS84", "crs84", "CRS:84", "CRS83", "crs:83", "CRS27", "CRS:27",
	"WGS84", "wgs 84", "urn:ogc:def:crs:OGC:1.3:CRS84", "urn:ogc:def:crs:OGC::CRS83", "urn:ogc:def:crs:OGC:1.3:CRS27",
	"urn:x-ogc:def:crs:OGC:1.3:CRS84", "http://www.opengis.net/def/crs/OGC/1.3/CRS84", "https://www.opengis.net/def/crs/OGC/0/CRS83",
}

// TestRegistryAgreesWithPROJ resolves every EPSG code of the registry,
// every code below 33,000 it does not hold, every alias form of a sample
// of codes, and the OGC spellings, through the registry and through PROJ,
// and fails on any difference: the registry must answer exactly as PROJ
// does, or leave the definition to PROJ.
func TestRegistryAgreesWithPROJ(t *testing.T) {
	p, err := proj.New(nil)
	require.NoError(t, err)
	defer p.Close()

	require.Equal(t, p.Authorities(), func() []string {
		var a []string
		for _, n := range []string{"EPSG", "ESRI", "IAU_2015", "IGNF", "NKG", "OGC", "PROJ", "NRCAN", "ISO"} {
			if epsg.IsAuthority(n) {
				a = append(a, n)
			}
		}
		return slices.Sorted(slices.Values(a))
	}(), "the registry's authorities are PROJ's")

	var inputs []string
	must := map[string]bool{} // inputs the registry must resolve itself
	codes := epsg.Codes()
	held := map[int]bool{}
	for i, n := range codes {
		held[n] = true
		inputs = append(inputs, "EPSG:"+strconv.Itoa(n))
		if i%97 == 0 || n == 4326 || n == 3857 || n == 4979 || n == 5773 || n == 9705 {
			inputs = append(inputs, aliasForms(n)...)
		}
	}
	for n := 0; n < 33000; n++ {
		if !held[n] {
			inputs = append(inputs, "urn:ogc:def:crs:EPSG::"+strconv.Itoa(n))
		}
	}
	for _, code := range []string{"43x6", "abc", "4326abc", "x4326", "A_1", "XYZ", "4326_1"} {
		for _, f := range []string{"EPSG:%s", "urn:ogc:def:crs:EPSG::%s", "http://www.opengis.net/def/crs/EPSG/0/%s"} {
			s := fmt.Sprintf(f, code)
			must[s], inputs = true, append(inputs, s)
		}
	}
	inputs = append(inputs, aliasForms(999999)...)
	inputs = append(inputs, aliasForms(6326)...)
	for _, s := range inputs {
		must[s] = true
	}
	for _, s := range ogcForms {
		must[s], inputs = true, append(inputs, s)
	}
	// Left to PROJ (or refused before it): the registry must not answer
	// them differently.
	inputs = append(inputs, "ogc:crs84", "urn:ogc:def:crs:ogc:1.3:CRS27", "http://www.opengis.net/def/crs/ogc/1.3/CRS84", "OGC:CRS84h", "OGC:AnsiDate", "urn:ogc:def:crs:OGC:1.3:crs84", "EPSG:4326+5773",
		"EPSG:+4326", "EPSG:4326.0", "EPSG:-4326", "EPSG:4326-", "EPSG::4326", "urn:ogc:def:crs:EPSG::4326:x",
		"urn:ogc:def:crs:EPSG::abc", "urn:ogc:def:crs:EPSG:x:4326", "HTTP://WWW.OPENGIS.NET/DEF/CRS/EPSG/0/4326",
		"http://www.opengis.net/def/crs/EPSG/4326", "http://www.opengis.net/def/crs/EPSG//4326", "ESRI:102100",
		"EPSG:99999999999999999999", "EPSG:4326e0", "EPSG:1e3", "EPSG:4.326", "urn:ogc:def:crs:EPSG::00000000004326", "IGNF:LAMB93", "foo", "")

	handled := 0
	for _, s := range inputs {
		def, problem := spatial.NormalizeCRS(s)
		if problem != "" {
			require.False(t, must[s], "%q refused before resolution: %s", s, problem)
			continue
		}
		info, fail, ok := spatial.RegistryResolve(s, def)
		if !ok {
			require.False(t, must[s], "the registry leaves %q to PROJ", s)
			continue
		}
		handled++
		want := projResolve(t, p, s)
		require.Equal(t, want, resolution{info: info, fail: fail}, "%q", s)
	}
	t.Logf("%d inputs, %d resolved by the registry, all as PROJ does (%s)", len(inputs), handled, epsg.Source)
}

// verdict is what a check decided, for comparison across resolvers.
func checkVerdict(res spatial.Result, err error) string {
	if err == nil {
		return fmt.Sprintf("ok %+v", res)
	}
	d := *classify.DetailOf(err)
	loc, fault := "-", "-"
	if d.Location != nil {
		loc = fmt.Sprint(*d.Location)
	}
	if d.Fault != nil {
		fault = fmt.Sprintf("%+v", *d.Fault)
	}
	d.Location, d.Fault = nil, nil
	return fmt.Sprintf("%v %v %+v at %s %s; %+v", classify.Classify(err), classify.StageOf(err), d, loc, fault, res)
}

// TestRegistryCheckVerdicts checks every corpus event, every hostile seed
// and every CRS spelling wrapped in an event with the registry and with
// PROJ alone: the verdicts (class, stage, reason, kind, EPSG, location,
// fault, result) must be the same.
func TestRegistryCheckVerdicts(t *testing.T) {
	reg := newChecker(t, nil)
	oracle := newChecker(t, nil)
	oracle.RegistryOff()

	var payloads [][]byte
	for _, it := range corpus.All() {
		payloads = append(payloads, it.Payload)
	}
	for _, f := range corpus.Hostile() {
		payloads = append(payloads, corpus.HostileSeeds(f.Input)...)
	}
	crss := append(slices.Clone(ogcForms), aliasForms(4326)...)
	crss = append(crss, aliasForms(3857)...)
	crss = append(crss, aliasForms(123)...)
	crss = append(crss, "EPSG:4979", "EPSG:9705", "EPSG:4978", "EPSG:5773", "EPSG:4269", "EPSG:2393", "urn:ogc:def:crs:EPSG::6326")
	for _, crs := range crss {
		for _, geom := range []string{`{"type":"Point","coordinates":[12.5,41.9]}`, `{"type":"Point","coordinates":[1e6,5e6]}`,
			`{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}`} {
			payloads = append(payloads, []byte(`{"crs":`+strconv.Quote(crs)+`,"geometry":`+geom+`}`))
		}
	}
	for _, p := range payloads {
		want := checkVerdict(oracle.CheckEvent(p))
		got := checkVerdict(reg.CheckEvent(p))
		require.Equal(t, want, got, "%s", clip(p))
	}
	t.Logf("%d events, same verdicts with the registry and with PROJ", len(payloads))
}

func clip(p []byte) string {
	s := string(p)
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return strings.ToValidUTF8(s, "?")
}
