package spatial

// Internals for the external tests (package spatial_test), which import
// spatial/geos and spatial/proj: package spatial cannot import them in its
// own tests (they import it).

var (
	NormalizeCRS  = normalizeCRS
	IdentifiedCRS = identifiedCRS
	QuoteClipped  = quoteClipped
)

// RegistryResolve is registryResolve, its entry spread out.
func RegistryResolve(declared, def string) (CRSInfo, *CRSError, bool) {
	e, ok := registryResolve(declared, def)
	return e.info, e.fail, ok
}

// RegistryOff makes c send every CRS to Options.ResolveCRS, bypassing
// the registry: PROJ alone, the oracle of the differential tests.
func (c *Checker) RegistryOff() { c.registryOff = true }

// CRSCacheLen is the number of cached CRS resolutions.
func (c *Checker) CRSCacheLen() int { return c.crsCache.Len() }

// CRSCached reports whether declared's resolution is cached.
func (c *Checker) CRSCached(declared string) bool {
	_, ok := c.crsCache.Get(declared)
	return ok
}

// ClearCRSCache drops every cached resolution.
func (c *Checker) ClearCRSCache() { c.crsCache.Clear() }

// CacheCRS caches info as declared's resolution.
func (c *Checker) CacheCRS(declared string, info CRSInfo) {
	c.crsCache.Put(declared, crsEntry{info: info})
}
