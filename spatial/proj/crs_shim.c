#include "crs_shim.h"

#include <stdlib.h>
#include <string.h>

static void gdlq_copy(char *dst, size_t n, const char *src) {
  if (src == NULL) {
    dst[0] = '\0';
    return;
  }
  strncpy(dst, src, n - 1);
  dst[n - 1] = '\0';
}

/* PROJ reports the detail of a failure ("proj_create: unrecognized format /
 * unknown name") only through its logger: keep the last error message. */
static void gdlq_log(void *app, int level, const char *msg) {
  gdlq_proj *p = (gdlq_proj *)app;
  if (level == PJ_LOG_ERROR && p != NULL) {
    gdlq_copy(p->lastmsg, sizeof p->lastmsg, msg);
  }
}

gdlq_proj *gdlq_proj_new(void) {
  gdlq_proj *p = calloc(1, sizeof *p);
  if (p == NULL) {
    return NULL;
  }
  p->ctx = proj_context_create();
  if (p->ctx == NULL) {
    free(p);
    return NULL;
  }
  proj_log_level(p->ctx, PJ_LOG_ERROR);
  proj_log_func(p->ctx, p, gdlq_log);
  return p;
}

void gdlq_proj_free(gdlq_proj *p) {
  if (p == NULL) {
    return;
  }
  proj_context_destroy(p->ctx);
  free(p);
}

static int gdlq_is_crs_type(PJ_TYPE t) {
  return t >= PJ_TYPE_CRS && t <= PJ_TYPE_OTHER_CRS;
}

static int gdlq_is_geographic_type(PJ_TYPE t) {
  return t == PJ_TYPE_GEOGRAPHIC_CRS || t == PJ_TYPE_GEOGRAPHIC_2D_CRS ||
         t == PJ_TYPE_GEOGRAPHIC_3D_CRS;
}

/* Parses a decimal EPSG code; 0 when code is not a positive integer. */
static int gdlq_atoi(const char *code) {
  long v = 0;
  if (code == NULL || *code == '\0') {
    return 0;
  }
  for (const char *s = code; *s; s++) {
    if (*s < '0' || *s > '9') {
      return 0;
    }
    v = v * 10 + (*s - '0');
    if (v > 2147483647L) {
      return 0;
    }
  }
  return (int)v;
}

/* Reads the EPSG code from the object's own identifiers. Returns 1 when an
 * identifier settled the question (even if it is not an EPSG one). */
static int gdlq_from_ids(const PJ *crs, gdlq_crs_info *out) {
  for (int i = 0;; i++) {
    const char *auth = proj_get_id_auth_name(crs, i);
    const char *code = proj_get_id_code(crs, i);
    if (auth == NULL || code == NULL) {
      return i > 0 && out->epsg != 0;
    }
    if (strcmp(auth, "EPSG") == 0) {
      out->epsg = gdlq_atoi(code);
      out->confidence = 100;
      return out->epsg != 0;
    }
    if (strcmp(auth, "OGC") == 0) {
      /* OGC's lon/lat twins of EPSG geographic CRSs. */
      int twin = 0;
      if (strcmp(code, "CRS84") == 0) {
        twin = 4326;
      } else if (strcmp(code, "CRS83") == 0) {
        twin = 4269;
      } else if (strcmp(code, "CRS27") == 0) {
        twin = 4267;
      }
      if (twin != 0) {
        out->epsg = twin;
        out->lonlat_alias = 1;
        out->confidence = 100;
        return 1;
      }
    }
  }
}

static void gdlq_identify(PJ_CONTEXT *ctx, const PJ *crs, int min_confidence,
                          gdlq_crs_info *out) {
  int *confidence = NULL;
  PJ_OBJ_LIST *list = proj_identify(ctx, crs, "EPSG", NULL, &confidence);
  if (list == NULL) {
    return;
  }
  int n = proj_list_get_count(list);
  /* Candidates come sorted by decreasing confidence. */
  for (int i = 0; i < n; i++) {
    if (confidence[i] < min_confidence) {
      break;
    }
    PJ *cand = proj_list_get(ctx, list, i);
    if (cand == NULL) {
      continue;
    }
    const char *code = proj_get_id_code(cand, 0);
    int epsg = gdlq_atoi(code);
    proj_destroy(cand);
    if (epsg != 0) {
      out->epsg = epsg;
      out->identified = 1;
      out->confidence = confidence[i];
      break;
    }
  }
  proj_int_list_destroy(confidence);
  proj_list_destroy(list);
}

void gdlq_resolve(gdlq_proj *p, const char *def, int min_confidence,
                  gdlq_crs_info *out) {
  memset(out, 0, sizeof *out);
  p->lastmsg[0] = '\0';

  PJ *obj = proj_create(p->ctx, def);
  if (obj == NULL) {
    out->proj_errno = proj_context_errno(p->ctx);
    if (p->lastmsg[0] != '\0') {
      gdlq_copy(out->msg, sizeof out->msg, p->lastmsg);
    } else {
      gdlq_copy(out->msg, sizeof out->msg,
                proj_context_errno_string(p->ctx, out->proj_errno));
    }
    return;
  }
  PJ_TYPE t = proj_get_type(obj);
  out->pj_type = (int)t;
  if (!gdlq_is_crs_type(t)) {
    gdlq_copy(out->msg, sizeof out->msg,
              "definition is not a coordinate reference system");
    proj_destroy(obj);
    return;
  }
  /* A BoundCRS (a proj string with +towgs84, say) wraps the CRS we want. */
  if (t == PJ_TYPE_BOUND_CRS) {
    PJ *src = proj_get_source_crs(p->ctx, obj);
    if (src != NULL) {
      proj_destroy(obj);
      obj = src;
      t = proj_get_type(obj);
    }
  }
  out->ok = 1;
  gdlq_copy(out->name, sizeof out->name, proj_get_name(obj));

  if (gdlq_is_geographic_type(t)) {
    out->geographic = 1;
  } else if (t == PJ_TYPE_COMPOUND_CRS) {
    PJ *horiz = proj_crs_get_sub_crs(p->ctx, obj, 0);
    if (horiz != NULL) {
      out->geographic = gdlq_is_geographic_type(proj_get_type(horiz));
      proj_destroy(horiz);
    }
  }

  if (!gdlq_from_ids(obj, out)) {
    gdlq_identify(p->ctx, obj, min_confidence, out);
  }
  proj_destroy(obj);
}

int gdlq_authorities(gdlq_proj *p, char *buf, int n) {
  PROJ_STRING_LIST list = proj_get_authorities_from_database(p->ctx);
  if (list == NULL) {
    return -1;
  }
  int used = 0;
  int rc = 0;
  for (PROJ_STRING_LIST it = list; *it != NULL; it++) {
    int len = (int)strlen(*it);
    if (used + len + 1 >= n) {
      rc = -1;
      break;
    }
    memcpy(buf + used, *it, (size_t)len);
    used += len;
    buf[used++] = '\n';
  }
  buf[used] = '\0';
  proj_string_list_destroy(list);
  return rc;
}

/* gdlq_export returns def as PROJJSON (type < 0) or as WKT of a
   PJ_WKT_TYPE (type >= 0), on one line, malloc'd; NULL when def is not a
   CRS PROJ can build. */
static char *gdlq_export(const char *def, int type) {
  PJ_CONTEXT *ctx = proj_context_create();
  if (ctx == NULL) {
    return NULL;
  }
  proj_log_level(ctx, PJ_LOG_NONE);
  char *out = NULL;
  PJ *pj = proj_create(ctx, def);
  if (pj != NULL) {
    if (proj_is_crs(pj)) {
      const char *opts[] = {"MULTILINE=NO", NULL};
      const char *s = type < 0 ? proj_as_projjson(ctx, pj, opts)
                               : proj_as_wkt(ctx, pj, (PJ_WKT_TYPE)type, opts);
      if (s != NULL) {
        out = strdup(s);
      }
    }
    proj_destroy(pj);
  }
  proj_context_destroy(ctx);
  return out;
}

char *gdlq_projjson(const char *def) { return gdlq_export(def, -1); }

char *gdlq_wkt(const char *def, int type) {
  if (type < 0) {
    return NULL;
  }
  return gdlq_export(def, type);
}
