/* A small shim over PROJ's C API that go-proj does not expose: resolving a
 * CRS definition to its EPSG code. Every function is called with the owning
 * Go value's mutex held; a gdlq_proj is never used from two threads at once.
 */
#ifndef GEODLQ_CRS_SHIM_H
#define GEODLQ_CRS_SHIM_H

#include <proj.h>

#define GDLQ_MSG_LEN 512
#define GDLQ_NAME_LEN 128

typedef struct {
  PJ_CONTEXT *ctx;
  char lastmsg[GDLQ_MSG_LEN]; /* last error PROJ logged, "" if none */
} gdlq_proj;

typedef struct {
  int ok;          /* 1 when def parsed as a CRS */
  int epsg;        /* EPSG code, or 0 when none is known */
  int geographic;  /* 1 when the (horizontal part of the) CRS is geographic */
  int lonlat_alias;/* 1 for OGC:CRS84/CRS83/CRS27: lon/lat twins of EPSG CRSs */
  int identified;  /* 1 when epsg came from proj_identify, not an identifier */
  int confidence;  /* proj_identify's confidence (100 for an identifier) */
  int pj_type;     /* proj_get_type of the object */
  int proj_errno;  /* PROJ error number when ok == 0 */
  char name[GDLQ_NAME_LEN]; /* the CRS's name, e.g. "WGS 84" */
  char msg[GDLQ_MSG_LEN];   /* PROJ's error message when ok == 0 */
} gdlq_crs_info;

gdlq_proj *gdlq_proj_new(void);
void gdlq_proj_free(gdlq_proj *p);
void gdlq_resolve(gdlq_proj *p, const char *def, int min_confidence,
                  gdlq_crs_info *out);
/* Writes the authorities in PROJ's database ("EPSG", "ESRI", ...) to buf,
 * each followed by a newline. Returns 0 on success, -1 if PROJ has no
 * database or buf is too small. */
int gdlq_authorities(gdlq_proj *p, char *buf, int n);
/* Returns PROJ's PROJJSON of the CRS def, on one line, in a string the
 * caller frees, or NULL when def is not a CRS PROJ knows. It uses a PROJ
 * context of its own, so calls may run concurrently. */
char *gdlq_projjson(const char *def);
/* gdlq_wkt returns PROJ's WKT of def (a PJ_WKT_TYPE) on one line, to be
 * freed, or NULL. */
char *gdlq_wkt(const char *def, int type);

#endif
