/* A small shim over GEOS's C API for the check path: a geometry built in
 * one call from positions laid out flat (x0 y0 x1 y1 ...) and a short
 * program saying how they nest, so that coordinates are copied once, from
 * the parser's array into GEOS's coordinate sequences, and validity is
 * checked in the same call. go-geos offers neither (its constructors take
 * [][]float64 and copy them twice; its WKB reader copies the buffer into C
 * memory first). A gdlq_geos is used by one thread at a time. */
#ifndef GEODLQ_GEOS_SHIM_H
#define GEODLQ_GEOS_SHIM_H

#include <stdint.h>

#include <geos_c.h>

#define GDLQ_GEOS_MSG_LEN 512

/* Program opcodes: the WKB geometry type codes. */
enum {
  GDLQ_POINT = 1,           /* [1]: one position */
  GDLQ_LINESTRING = 2,      /* [2, n]: n positions */
  GDLQ_POLYGON = 3,         /* [3, rings, n0, n1, ...] */
  GDLQ_MULTIPOINT = 4,      /* [4, n] */
  GDLQ_MULTILINESTRING = 5, /* [5, lines, n0, n1, ...] */
  GDLQ_MULTIPOLYGON = 6,    /* [6, polygons, (rings, n0, ...)...] */
  GDLQ_COLLECTION = 7       /* [7, members, member programs...] */
};

/* GDLQ_MAX_NESTING bounds nested collections in a program. */
#define GDLQ_MAX_NESTING 64

typedef struct {
  GEOSContextHandle_t h;
  char msg[GDLQ_GEOS_MSG_LEN]; /* the last error GEOS reported, "" if none */
} gdlq_geos;

gdlq_geos *gdlq_geos_new(void);
void gdlq_geos_free(gdlq_geos *g);

/* gdlq_build builds the geometry prog describes over the npts positions at
 * xy. It returns NULL, with a message in g->msg, when GEOS refuses it or
 * the program does not match the positions (it never reads outside prog
 * or xy). The caller destroys the result with gdlq_destroy. */
GEOSGeometry *gdlq_build(gdlq_geos *g, const double *xy, int64_t npts,
                         const int64_t *prog, int64_t nprog);

/* gdlq_check builds the geometry as gdlq_build does and checks its
 * validity. It returns 1 for a valid geometry, 0 for an invalid one (with
 * GEOS's reason in out), -1 when the geometry could not be built and -2
 * when GEOS failed to check it (with GEOS's message in out). out holds at
 * most outlen bytes, NUL included. */
int gdlq_check(gdlq_geos *g, const double *xy, int64_t npts,
               const int64_t *prog, int64_t nprog, char *out, int outlen);

/* gdlq_is_valid is GEOSisValid_r: 1 valid, 0 invalid, 2 exception. */
int gdlq_is_valid(gdlq_geos *g, const GEOSGeometry *geom);
void gdlq_destroy(gdlq_geos *g, GEOSGeometry *geom);

#endif
