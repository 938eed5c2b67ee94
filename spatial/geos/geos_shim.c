#include "geos_shim.h"

#include <stdlib.h>
#include <string.h>

static void gdlq_geos_copy(char *dst, size_t n, const char *src) {
  if (n == 0) {
    return;
  }
  if (src == NULL) {
    dst[0] = '\0';
    return;
  }
  strncpy(dst, src, n - 1);
  dst[n - 1] = '\0';
}

static void gdlq_geos_error(const char *msg, void *userdata) {
  gdlq_geos *g = (gdlq_geos *)userdata;
  gdlq_geos_copy(g->msg, sizeof g->msg, msg);
}

static void gdlq_geos_notice(const char *msg, void *userdata) {
  (void)msg;
  (void)userdata;
}

gdlq_geos *gdlq_geos_new(void) {
  gdlq_geos *g = calloc(1, sizeof *g);
  if (g == NULL) {
    return NULL;
  }
  g->h = GEOS_init_r();
  if (g->h == NULL) {
    free(g);
    return NULL;
  }
  GEOSContext_setErrorMessageHandler_r(g->h, gdlq_geos_error, g);
  GEOSContext_setNoticeMessageHandler_r(g->h, gdlq_geos_notice, g);
  return g;
}

void gdlq_geos_free(gdlq_geos *g) {
  if (g == NULL) {
    return;
  }
  GEOS_finish_r(g->h);
  free(g);
}

/* builder walks a program. */
typedef struct {
  gdlq_geos *g;
  const double *xy;
  int64_t npts, pt;
  const int64_t *prog;
  int64_t nprog, pc;
} builder;

static void fail(builder *b, const char *msg) {
  gdlq_geos_copy(b->g->msg, sizeof b->g->msg, msg);
}

/* next reads the next program word, or fails. */
static int next(builder *b, int64_t *v) {
  if (b->pc >= b->nprog) {
    fail(b, "geodlq: geometry program ends early");
    return 0;
  }
  *v = b->prog[b->pc++];
  return 1;
}

/* take reserves n positions and returns the index of the first, or -1. */
static int64_t take(builder *b, int64_t n) {
  if (n < 0 || n > b->npts - b->pt || n > UINT32_MAX) {
    fail(b, "geodlq: geometry program does not match its positions");
    return -1;
  }
  int64_t first = b->pt;
  b->pt += n;
  return first;
}

static GEOSCoordSequence *seq(builder *b, int64_t n) {
  int64_t first = take(b, n);
  if (first < 0) {
    return NULL;
  }
  if (n == 0) {
    return GEOSCoordSeq_create_r(b->g->h, 0, 2);
  }
  return GEOSCoordSeq_copyFromBuffer_r(b->g->h, b->xy + 2 * first,
                                       (unsigned int)n, 0, 0);
}

static GEOSGeometry *line(builder *b, int ring) {
  int64_t n;
  if (!next(b, &n)) {
    return NULL;
  }
  GEOSCoordSequence *s = seq(b, n);
  if (s == NULL) {
    return NULL;
  }
  /* Both take ownership of s, also when they fail. */
  return ring ? GEOSGeom_createLinearRing_r(b->g->h, s)
              : GEOSGeom_createLineString_r(b->g->h, s);
}

static void destroy_all(builder *b, GEOSGeometry **gs, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    GEOSGeom_destroy_r(b->g->h, gs[i]);
  }
  free(gs);
}

/* parts reads a count of parts, at most max, and allocates an array for
 * them. */
static GEOSGeometry **parts(builder *b, int64_t *n, int64_t max) {
  if (!next(b, n)) {
    return NULL;
  }
  if (*n < 0 || *n > max || *n > UINT32_MAX) {
    fail(b, "geodlq: geometry program has a bad part count");
    return NULL;
  }
  GEOSGeometry **gs = malloc((size_t)(*n > 0 ? *n : 1) * sizeof *gs);
  if (gs == NULL) {
    fail(b, "geodlq: out of memory");
  }
  return gs;
}

static GEOSGeometry *polygon(builder *b) {
  int64_t n;
  /* Every ring takes a program word: a larger count is a lie. */
  GEOSGeometry **rings = parts(b, &n, b->nprog - b->pc - 1);
  if (rings == NULL) {
    return NULL;
  }
  if (n == 0) {
    free(rings);
    return GEOSGeom_createEmptyPolygon_r(b->g->h);
  }
  for (int64_t i = 0; i < n; i++) {
    rings[i] = line(b, 1);
    if (rings[i] == NULL) {
      destroy_all(b, rings, i);
      return NULL;
    }
  }
  /* Takes ownership of the rings, also when it fails. */
  GEOSGeometry *p = GEOSGeom_createPolygon_r(b->g->h, rings[0], rings + 1,
                                             (unsigned int)(n - 1));
  free(rings);
  return p;
}

static GEOSGeometry *geometry(builder *b, int depth);

/* collection builds n parts of one kind into a collection of type t. */
static GEOSGeometry *collection(builder *b, int t, int depth) {
  int64_t n;
  /* A point takes a position, anything else a program word: a larger
   * count is a lie. */
  int64_t max = t == GEOS_MULTIPOINT ? b->npts - b->pt : b->nprog - b->pc - 1;
  GEOSGeometry **gs = parts(b, &n, max);
  if (gs == NULL) {
    return NULL;
  }
  for (int64_t i = 0; i < n; i++) {
    GEOSGeometry *m = NULL;
    switch (t) {
    case GEOS_MULTIPOINT: {
      int64_t at = take(b, 1);
      if (at >= 0) {
        m = GEOSGeom_createPointFromXY_r(b->g->h, b->xy[2 * at],
                                         b->xy[2 * at + 1]);
      }
      break;
    }
    case GEOS_MULTILINESTRING:
      m = line(b, 0);
      break;
    case GEOS_MULTIPOLYGON:
      m = polygon(b);
      break;
    default:
      m = geometry(b, depth + 1);
    }
    if (m == NULL) {
      destroy_all(b, gs, i);
      return NULL;
    }
    gs[i] = m;
  }
  GEOSGeometry *c;
  if (n == 0) {
    c = GEOSGeom_createEmptyCollection_r(b->g->h, t);
  } else {
    /* Takes ownership of the parts, also when it fails. */
    c = GEOSGeom_createCollection_r(b->g->h, t, gs, (unsigned int)n);
  }
  free(gs);
  return c;
}

static GEOSGeometry *geometry(builder *b, int depth) {
  int64_t op;
  if (depth > GDLQ_MAX_NESTING) {
    fail(b, "geodlq: geometry program nested too deeply");
    return NULL;
  }
  if (!next(b, &op)) {
    return NULL;
  }
  switch (op) {
  case GDLQ_POINT: {
    int64_t at = take(b, 1);
    if (at < 0) {
      return NULL;
    }
    return GEOSGeom_createPointFromXY_r(b->g->h, b->xy[2 * at],
                                        b->xy[2 * at + 1]);
  }
  case GDLQ_LINESTRING:
    return line(b, 0);
  case GDLQ_POLYGON:
    return polygon(b);
  case GDLQ_MULTIPOINT:
    return collection(b, GEOS_MULTIPOINT, depth);
  case GDLQ_MULTILINESTRING:
    return collection(b, GEOS_MULTILINESTRING, depth);
  case GDLQ_MULTIPOLYGON:
    return collection(b, GEOS_MULTIPOLYGON, depth);
  case GDLQ_COLLECTION:
    return collection(b, GEOS_GEOMETRYCOLLECTION, depth);
  }
  fail(b, "geodlq: unknown opcode in geometry program");
  return NULL;
}

GEOSGeometry *gdlq_build(gdlq_geos *g, const double *xy, int64_t npts,
                         const int64_t *prog, int64_t nprog) {
  builder b = {g, xy, npts, 0, prog, nprog, 0};
  g->msg[0] = '\0';
  GEOSGeometry *geom = geometry(&b, 0);
  if (geom != NULL && (b.pc != nprog || b.pt != npts)) {
    GEOSGeom_destroy_r(g->h, geom);
    fail(&b, "geodlq: geometry program does not cover its positions");
    return NULL;
  }
  if (geom == NULL && g->msg[0] == '\0') {
    fail(&b, "GEOS returned no geometry");
  }
  return geom;
}

int gdlq_check(gdlq_geos *g, const double *xy, int64_t npts,
               const int64_t *prog, int64_t nprog, char *out, int outlen) {
  GEOSGeometry *geom = gdlq_build(g, xy, npts, prog, nprog);
  if (geom == NULL) {
    gdlq_geos_copy(out, (size_t)outlen, g->msg);
    return -1;
  }
  char *reason = GEOSisValidReason_r(g->h, geom);
  GEOSGeom_destroy_r(g->h, geom);
  if (reason == NULL) {
    gdlq_geos_copy(out, (size_t)outlen,
                   g->msg[0] ? g->msg : "GEOS could not check validity");
    return -2;
  }
  int valid = strcmp(reason, "Valid Geometry") == 0;
  gdlq_geos_copy(out, (size_t)outlen, reason);
  GEOSFree_r(g->h, reason);
  return valid;
}

int gdlq_is_valid(gdlq_geos *g, const GEOSGeometry *geom) {
  return GEOSisValid_r(g->h, geom);
}

void gdlq_destroy(gdlq_geos *g, GEOSGeometry *geom) {
  GEOSGeom_destroy_r(g->h, geom);
}
