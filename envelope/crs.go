package envelope

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrUnknownCRS is wrapped by [ParseEPSG] for a CRS string it cannot map to
// an EPSG code.
var ErrUnknownCRS = errors.New("envelope: CRS has no recognisable EPSG code")

// ParseEPSG maps a CRS identifier to its EPSG code, in pure Go and without
// a CRS database. It recognises (case-insensitively, surrounding spaces
// ignored):
//
//	EPSG:3857                                       → 3857
//	urn:ogc:def:crs:EPSG::3857, urn:ogc:def:crs:EPSG:9.9.1:3857 → 3857
//	http(s)://www.opengis.net/def/crs/EPSG/0/3857   → 3857
//	CRS84, OGC:CRS84, urn:ogc:def:crs:OGC:1.3:CRS84, urn:ogc:def:crs:OGC::CRS84,
//	http(s)://www.opengis.net/def/crs/OGC/1.3/CRS84 → 4326
//
// Anything else (WKT, PROJ strings, other authorities) is an error wrapping
// [ErrUnknownCRS]. It is the default of [BuilderOptions].ResolveEPSG; a
// pipeline that has go-proj can pass a resolver that understands more.
func ParseEPSG(crs string) (int, error) {
	s := strings.ToLower(strings.TrimSpace(crs))
	fail := func() (int, error) { return 0, fmt.Errorf("%w: %q", ErrUnknownCRS, crs) }
	switch s {
	case "crs84", "ogc:crs84", "urn:ogc:def:crs:ogc:1.3:crs84", "urn:ogc:def:crs:ogc::crs84",
		"http://www.opengis.net/def/crs/ogc/1.3/crs84", "https://www.opengis.net/def/crs/ogc/1.3/crs84":
		return 4326, nil
	}
	var code string
	switch {
	case strings.HasPrefix(s, "epsg:"):
		code = s[len("epsg:"):]
	case strings.HasPrefix(s, "urn:ogc:def:crs:epsg:"):
		rest := s[len("urn:ogc:def:crs:epsg:"):]
		i := strings.LastIndexByte(rest, ':')
		if i < 0 {
			return fail()
		}
		if v := rest[:i]; v != "" && strings.Trim(v, "0123456789.") != "" {
			return fail()
		}
		code = rest[i+1:]
	case strings.HasPrefix(s, "http://www.opengis.net/def/crs/epsg/"), strings.HasPrefix(s, "https://www.opengis.net/def/crs/epsg/"):
		_, rest, _ := strings.Cut(s, "/def/crs/epsg/")
		v, c, ok := strings.Cut(rest, "/")
		if !ok || strings.Trim(v, "0123456789.") != "" {
			return fail()
		}
		code = c
	default:
		return fail()
	}
	if code == "" || len(code) > 9 || strings.Trim(code, "0123456789") != "" {
		return fail()
	}
	n, err := strconv.Atoi(code)
	if err != nil || n <= 0 {
		return fail()
	}
	return n, nil
}
