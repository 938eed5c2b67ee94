package spatial

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/internal/epsg"
)

const (
	// maxCRSLen bounds a CRS definition (WKT can be long; hostile strings
	// must not reach PROJ or the cache unbounded).
	maxCRSLen = 8 << 10
	// defaultCRS is RFC 7946's CRS, assumed when an event declares none.
	defaultCRS = "OGC:CRS84"
)

// CRSInfo is what PROJ made of a CRS definition.
type CRSInfo struct {
	// EPSG is the EPSG code, or 0 when the CRS has no EPSG equivalent.
	// OGC:CRS84 (RFC 7946's CRS, WGS 84 in lon/lat order) resolves to 4326.
	EPSG int
	// Name is PROJ's name for the CRS, such as "WGS 84 (CRS84)".
	Name string
	// Geographic is true for a geographic (lon/lat) CRS, or a compound CRS
	// whose horizontal part is geographic.
	Geographic bool
	// LonLatTwin is true for OGC:CRS84, CRS83 and CRS27: lon/lat twins of
	// EPSG 4326, 4269 and 4267 whose official axis order is lat/lon. GeoJSON
	// is always lon/lat, so the difference does not matter here.
	LonLatTwin bool
	// Identified is true when EPSG came from proj_identify (confidence of
	// at least 70) because the definition carries no identifier, as for
	// "+proj=longlat +datum=WGS84 +type=crs".
	Identified bool
}

// CRSError is a CRS definition that could not be resolved: PROJ refused it,
// or it was refused before reaching PROJ.
type CRSError struct {
	// Definition is the CRS as declared.
	Definition string
	// Errno is PROJ's error number, or 0 when the definition did not reach
	// PROJ.
	Errno int
	// Message is PROJ's own message, such as "proj_create: crs not
	// found", or the reason the definition did not reach PROJ.
	Message string
	// Err, when set, is the sentinel the error wraps: [ErrNeedsPROJ].
	Err error
}

// Unwrap returns e.Err.
func (e *CRSError) Unwrap() error { return e.Err }

// Error returns `unparseable CRS "<definition>": <message>`, the
// definition clipped to its first 200 bytes when longer (it is
// untrusted: a 30 MB definition must not become a 30 MB message, copied
// into every reason and log line).
func (e *CRSError) Error() string {
	return fmt.Sprintf("unparseable CRS %s: %s", quoteClipped(e.Definition), e.Message)
}

// maxQuoted is how much of an untrusted string a message quotes.
const maxQuoted = 200

// quoteClipped quotes s, clipped to maxQuoted bytes (at a rune boundary)
// with its full length noted.
func quoteClipped(s string) string {
	if len(s) <= maxQuoted {
		return strconv.Quote(s)
	}
	cut := maxQuoted
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "…(" + strconv.Itoa(len(s)) + " bytes)"
}

// CRSMismatchError is a CRS that resolved to another EPSG code than the
// pipeline expects.
type CRSMismatchError struct {
	// Declared is the CRS as declared.
	Declared string
	// Info is what it resolved to.
	Info CRSInfo
	// Expected is the pipeline's EPSG code.
	Expected int
}

// Error describes the mismatch.
func (e *CRSMismatchError) Error() string {
	if e.Info.EPSG == 0 {
		return fmt.Sprintf("payload CRS %s (%s) has no EPSG code; pipeline expects EPSG:%d", quoteClipped(e.Declared), e.Info.Name, e.Expected)
	}
	return fmt.Sprintf("payload CRS is EPSG:%d (%s) but pipeline expects EPSG:%d", e.Info.EPSG, e.Info.Name, e.Expected)
}

// crsEntry is a cached resolution: info, or the failure.
type crsEntry struct {
	info CRSInfo
	fail *CRSError
}

// crsAliases maps bare names that PROJ does not know, or would look up
// slowly and approximately, to definitions it resolves directly.
var crsAliases = map[string]string{
	"CRS84":  "OGC:CRS84",
	"CRS:84": "OGC:CRS84",
	"CRS83":  "OGC:CRS83",
	"CRS:83": "OGC:CRS83",
	"CRS27":  "OGC:CRS27",
	"CRS:27": "OGC:CRS27",
	"WGS84":  "EPSG:4326",
	"WGS 84": "EPSG:4326",
}

// normalizeCRS turns a declared CRS into a definition for proj_create, or
// explains why it should not be passed to PROJ at all. PROJ treats what it
// cannot parse as a name to search for: the search takes 100-300 ms and
// matches approximately ("foo" finds Amersfoort, EPSG:4289). So only
// well-formed definitions reach PROJ, naming authorities its database
// knows; bare names other than the aliases above are refused. Otherwise a
// stream of distinct junk strings would be a cheap denial of service.
func normalizeCRS(s string) (def, problem string) {
	t := strings.TrimSpace(s)
	switch {
	case t == "":
		return "", "empty CRS definition"
	case len(t) > maxCRSLen:
		return "", "CRS definition is longer than " + strconv.Itoa(maxCRSLen) + " bytes"
	case strings.IndexByte(t, 0) >= 0:
		return "", "CRS definition contains a NUL byte"
	}
	if a, ok := crsAliases[strings.ToUpper(t)]; ok {
		return a, ""
	}
	lower := strings.ToLower(t)
	switch {
	case strings.HasPrefix(lower, "+proj=") || strings.HasPrefix(lower, "proj=") || strings.HasPrefix(lower, "+init="):
		// PROJ reads a PROJ string without +type=crs as an operation.
		if !strings.Contains(lower, "type=crs") {
			t += " +type=crs"
		}
		return t, ""
	case t[0] == '{':
		return t, "" // PROJJSON
	case isWKT(t):
		return t, ""
	case strings.HasPrefix(lower, "urn:ogc:def:crs:") || strings.HasPrefix(lower, "urn:x-ogc:def:crs:"):
		// urn:ogc:def:crs:AUTH:[version]:CODE
		rest := t[strings.Index(lower, "crs:")+len("crs:"):]
		auth, _, _ := strings.Cut(rest, ":")
		if !epsg.IsAuthority(auth) {
			return "", fmt.Sprintf("unknown CRS authority %q", auth)
		}
		return t, ""
	case strings.HasPrefix(lower, "http://www.opengis.net/def/crs/") || strings.HasPrefix(lower, "https://www.opengis.net/def/crs/"):
		// http://www.opengis.net/def/crs/AUTH/version/CODE
		rest := t[strings.Index(lower, "/crs/")+len("/crs/"):]
		auth, _, _ := strings.Cut(rest, "/")
		if !epsg.IsAuthority(auth) {
			return "", fmt.Sprintf("unknown CRS authority %q", auth)
		}
		return t, ""
	}
	if auth, code, ok := strings.Cut(t, ":"); ok && isAuthCode(auth, code) {
		if !epsg.IsAuthority(auth) {
			return "", fmt.Sprintf("unknown CRS authority %q", auth)
		}
		if strings.Contains(code, "+") {
			return t, "" // a compound CRS, EPSG:4326+5773
		}
		// The same lookup; as AUTH:CODE a miss costs PROJ ~10 ms of
		// fallback searching, as a URN under 1 ms.
		return "urn:ogc:def:crs:" + auth + "::" + code, ""
	}
	return "", "not an AUTHORITY:CODE, OGC URN or URL, PROJ string, WKT or PROJJSON definition (CRS names are not looked up)"
}

// isAuthCode reports whether auth:code looks like AUTHORITY:CODE
// ("EPSG:4326", "ESRI:102100", "IAU_2015:30100", "EPSG:4326+5773").
func isAuthCode(auth, code string) bool {
	if auth == "" || code == "" {
		return false
	}
	for i := 0; i < len(auth); i++ {
		c := auth[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c == '_' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	for i := 0; i < len(code); i++ {
		c := code[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '+' || c == '-') {
			return false
		}
	}
	return true
}

// wktKeywords are the WKT1 and WKT2 keywords a CRS definition starts with.
// PROJ searches its database by name for anything else, slowly.
var wktKeywords = map[string]bool{
	"GEOGCS": true, "PROJCS": true, "GEOCCS": true, "VERT_CS": true, "COMPD_CS": true,
	"LOCAL_CS": true, "FITTED_CS": true, "GEOGCRS": true, "GEOGRAPHICCRS": true,
	"PROJCRS": true, "PROJECTEDCRS": true, "GEODCRS": true, "GEODETICCRS": true,
	"VERTCRS": true, "VERTICALCRS": true, "COMPOUNDCRS": true, "BOUNDCRS": true,
	"ENGCRS": true, "ENGINEERINGCRS": true, "PARAMETRICCRS": true, "TIMECRS": true,
	"DERIVEDPROJCRS": true,
}

// isWKT reports whether s starts like a WKT CRS: a CRS keyword, then '['
// or '('.
func isWKT(s string) bool {
	i := strings.IndexAny(s, "[(")
	return i > 0 && wktKeywords[strings.ToUpper(strings.TrimSpace(s[:i]))]
}

// resolve returns the (cached) resolution of a declared CRS: by the
// pure-Go registry (internal/epsg, generated from PROJ's proj.db) for
// EPSG and OGC codes in every form, by Options.ResolveCRS (PROJ) for the
// rest.
func (c *Checker) resolve(declared string) crsEntry {
	if e, ok := c.crsCache.Get(declared); ok {
		return e
	}
	def, problem := normalizeCRS(declared)
	if problem != "" {
		e := crsEntry{fail: &CRSError{Definition: declared, Message: problem}}
		if len(declared) <= maxCRSLen {
			c.crsCache.Put(declared, e)
		}
		return e
	}
	if e, ok := registryResolve(declared, def); ok && !c.registryOff {
		c.crsCache.Put(declared, e)
		return e
	}
	var e crsEntry
	switch {
	case c.opts.ResolveCRS != nil:
		info, err := c.opts.ResolveCRS(def)
		var ce *CRSError
		switch {
		case err == nil:
			e.info = info
		case errors.As(err, &ce):
			f := *ce
			f.Definition = declared
			e.fail = &f
		default:
			// Not a verdict on the definition (the resolver is closed):
			// reported, not cached.
			return crsEntry{fail: &CRSError{Definition: declared, Message: err.Error()}}
		}
	default:
		// Without a resolver: WKT and PROJJSON naming their EPSG (or OGC)
		// code at the top level (identifiedCRS); the rest is a verdict
		// wrapping ErrNeedsPROJ, cached like PROJ's, never a default CRS.
		if info, ok := identifiedCRS(def); ok {
			e.info = info
		} else {
			e.fail = &CRSError{Definition: declared, Message: ErrNeedsPROJ.Error(), Err: ErrNeedsPROJ}
		}
	}
	c.crsCache.Put(declared, e)
	return e
}

// projErrCRSNotFound is PROJ's errno for a code its database does not
// hold (PROJ_ERR_OTHER, which proj_create sets).
const projErrCRSNotFound = 4096

// notFound is PROJ's message for a code its database does not hold.
const notFound = "proj_create: crs not found"

// registryResolve resolves def (normalizeCRS's output) from the
// registry when it is an EPSG code or one of OGC's CRS84, CRS83 and
// CRS27, in a form whose meaning to PROJ is known: "OGC:CRS84",
// "EPSG:n", urn:ogc:def:crs:AUTH:[version]:CODE (or urn:x-ogc:, any case,
// or without the version field) and
// http(s)://www.opengis.net/def/crs/AUTH/version/CODE (lower-case prefix:
// PROJ does not resolve an upper-case URL). ok is false for anything
// else, which only PROJ can resolve. The answer is PROJ's, for every
// code (TestRegistryAgreesWithPROJ).
func registryResolve(declared, def string) (e crsEntry, ok bool) {
	var auth, code string
	lower := strings.ToLower(def)
	switch {
	case def == "OGC:CRS84" || def == "OGC:CRS83" || def == "OGC:CRS27" || def == "EPSG:4326":
		auth, code, _ = strings.Cut(def, ":")
	case strings.HasPrefix(lower, "urn:ogc:def:crs:") || strings.HasPrefix(lower, "urn:x-ogc:def:crs:"):
		f := strings.Split(def[strings.Index(lower, "crs:")+len("crs:"):], ":")
		switch {
		case len(f) == 2:
			auth, code = f[0], f[1]
		case len(f) == 3 && isVersion(f[1], true):
			auth, code = f[0], f[2]
		default:
			return crsEntry{}, false
		}
	case strings.HasPrefix(def, "http://www.opengis.net/def/crs/") || strings.HasPrefix(def, "https://www.opengis.net/def/crs/"):
		f := strings.Split(def[strings.Index(def, "/crs/")+len("/crs/"):], "/")
		if len(f) != 3 || !isVersion(f[1], false) {
			return crsEntry{}, false
		}
		auth, code = f[0], f[2]
	default:
		return crsEntry{}, false
	}
	// PROJ takes EPSG in any case, OGC only in upper case.
	switch {
	case strings.EqualFold(auth, "EPSG"):
		if hasLetter(code) {
			// EPSG's codes are numbers; PROJ finds none with a letter
			// (other than an exponent's e, which it may read as one).
			return crsEntry{fail: &CRSError{Definition: declared, Errno: projErrCRSNotFound, Message: notFound}}, true
		}
		if !isDigits(code) || len(strings.TrimLeft(code, "0")) > 9 {
			return crsEntry{}, false
		}
		n, _ := strconv.Atoi(code)
		crs, found := epsg.Lookup(n)
		if !found {
			return crsEntry{fail: &CRSError{Definition: declared, Errno: projErrCRSNotFound, Message: notFound}}, true
		}
		return crsEntry{info: CRSInfo{EPSG: n, Name: crs.Name, Geographic: crs.Geographic()}}, true
	case auth == "OGC":
		twin := map[string]int{"CRS84": 4326, "CRS83": 4269, "CRS27": 4267}[code]
		crs, found := epsg.LookupOGC(code)
		if twin == 0 || !found {
			return crsEntry{}, false
		}
		return crsEntry{info: CRSInfo{EPSG: twin, Name: crs.Name, Geographic: crs.Geographic(), LonLatTwin: true}}, true
	}
	return crsEntry{}, false
}

// isVersion reports whether v is a URN's or URL's version field: digits
// and dots (and empty, in a URN).
func isVersion(v string, emptyOK bool) bool {
	if v == "" {
		return emptyOK
	}
	for i := 0; i < len(v); i++ {
		if (v[i] < '0' || v[i] > '9') && v[i] != '.' {
			return false
		}
	}
	return true
}

// hasLetter reports whether s holds an ASCII letter other than e or E,
// or an underscore.
func hasLetter(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i] | 0x20
		if c >= 'a' && c <= 'z' && c != 'e' || s[i] == '_' {
			return true
		}
	}
	return false
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// ResolveCRS resolves a CRS definition — "EPSG:4326", "epsg:4326",
// "urn:ogc:def:crs:EPSG::4326", "OGC:CRS84", "CRS84", a PROJ string, WKT or
// PROJJSON — and caches the result (positive or negative) in a cache
// bounded by Options.CRSCacheSize. EPSG codes and OGC's CRS84, CRS83 and
// CRS27, in every spelling, resolve from the registry generated from
// PROJ's proj.db (internal/epsg), with PROJ's answer, in every build; so
// do WKT and PROJJSON naming their EPSG (or OGC) code at the top level.
// The rest needs PROJ, Options.ResolveCRS (spatial/proj): without it it
// fails (crs_unparseable, wrapping [ErrNeedsPROJ], its message saying so).
//
// Only well-formed definitions reach PROJ: an AUTHORITY:CODE, OGC URN or
// opengis.net URL must name an authority in PROJ's database, WKT must open
// with a CRS keyword, a PROJ string with +proj= or +init=. Bare names other
// than CRS84, CRS83, CRS27 and WGS84 are refused. PROJ would search its
// database for anything else by name, approximately (so "foo" finds
// Amersfoort) and at 100-300 ms a string, which a producer sending
// distinct junk could turn into a denial of service.
//
// The error is a [*classify.Error] of class crs_mismatch at the
// crs_transform stage, kind crs_unparseable, wrapping a [*CRSError] that
// carries PROJ's own message.
func (c *Checker) ResolveCRS(crs string) (CRSInfo, error) {
	if c.closed.Load() {
		return CRSInfo{}, errClosed(classify.StageCRSTransform)
	}
	e := c.resolve(crs)
	if e.fail != nil {
		if c.closed.Load() {
			return CRSInfo{}, errClosed(classify.StageCRSTransform)
		}
		return CRSInfo{}, unparseable(e.fail)
	}
	return e.info, nil
}

// ResolveEPSG returns the EPSG code of a CRS definition, as
// [Checker.ResolveCRS] resolves it. It returns 0 and no error for a CRS
// PROJ understands that has no EPSG equivalent.
func (c *Checker) ResolveEPSG(crs string) (int, error) {
	info, err := c.ResolveCRS(crs)
	return info.EPSG, err
}

// CheckCRS checks a declared CRS against the pipeline's EPSG code. An empty
// declaration means RFC 7946's default, OGC:CRS84, which passes a 4326
// pipeline. An expectedEPSG of 0 or less only requires the CRS to be
// resolvable.
//
// The error is a [*classify.Error] of class crs_mismatch at the
// crs_transform stage: kind crs_unparseable with EPSG 0 wrapping a
// [*CRSError] when the CRS cannot be resolved, kind crs_differs with the
// CRS's EPSG code wrapping a [*CRSMismatchError] when it resolves to
// another code (or to none).
func (c *Checker) CheckCRS(declared string, expectedEPSG int) error {
	if _, err := c.checkCRS(declared, expectedEPSG); err != nil {
		return err
	}
	return nil
}

func (c *Checker) checkCRS(declared string, expected int) (CRSInfo, *classify.Error) {
	if c.closed.Load() {
		return CRSInfo{}, errClosed(classify.StageCRSTransform)
	}
	def := declared
	if strings.TrimSpace(def) == "" {
		def = defaultCRS
	}
	e := c.resolve(def)
	if e.fail != nil {
		if c.closed.Load() {
			// Closed while we resolved: not the CRS's fault.
			return CRSInfo{}, errClosed(classify.StageCRSTransform)
		}
		f := *e.fail
		f.Definition = declared
		return CRSInfo{}, unparseable(&f)
	}
	if expected > 0 && e.info.EPSG != expected {
		m := &CRSMismatchError{Declared: declared, Info: e.info, Expected: expected}
		return e.info, &classify.Error{
			Class: classify.ClassCRSMismatch,
			Stage: classify.StageCRSTransform,
			Geometry: &classify.GeometryDetail{
				Reason: m.Error(),
				Kind:   classify.KindCRSDiffers,
				EPSG:   e.info.EPSG,
			},
			Err: fmt.Errorf("spatial: %w", m),
		}
	}
	return e.info, nil
}

func unparseable(f *CRSError) *classify.Error {
	return &classify.Error{
		Class: classify.ClassCRSMismatch,
		Stage: classify.StageCRSTransform,
		Geometry: &classify.GeometryDetail{
			Reason: f.Error(),
			Kind:   classify.KindCRSUnparseable,
		},
		Err: fmt.Errorf("spatial: %w", f),
	}
}
