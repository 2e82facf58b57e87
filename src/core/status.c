/* Status codes and the thread-local error message. */
#include "core/core.h"

#include <stdio.h>

/* room for a message quoting two paths of up to PATH_MAX (4096) bytes whole */
static _Thread_local char ta_message[9216];

static ta_status ta_verror(ta_status code, const char *fmt, va_list ap)
{
    vsnprintf(ta_message, sizeof ta_message, fmt, ap);
    return code;
}

ta_status ta_error(ta_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ta_verror(code, fmt, ap);
    va_end(ap);
    return code;
}

/* The public face of ta_error, for layers built on the public API. */
ta_status ta_set_error(ta_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ta_verror(code, fmt, ap);
    va_end(ap);
    return code;
}

void ta_error_clear(void) { ta_message[0] = '\0'; }

const char *ta_last_error(void) { return ta_message; }

const char *ta_version(void) { return TA_VERSION_STRING; }

const char *ta_status_name(ta_status status)
{
    switch (status) {
    case TA_OK: return "TA_OK";
    case TA_EINVAL: return "TA_EINVAL";
    case TA_ESHAPE: return "TA_ESHAPE";
    case TA_ENOMEM: return "TA_ENOMEM";
    case TA_EIO: return "TA_EIO";
    case TA_EFORMAT: return "TA_EFORMAT";
    case TA_EUNSUPPORTED: return "TA_EUNSUPPORTED";
    case TA_EINTERNAL: return "TA_EINTERNAL";
    }
    return "TA_UNKNOWN";
}

char *ta_shape_str(char *buf, size_t size, int ndim, const int64_t *shape)
{
    size_t n = 0;
    if (size == 0) return buf;
    buf[0] = '\0';
    n += (size_t)snprintf(buf + n, size - n, "[");
    for (int i = 0; i < ndim && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (n < size) snprintf(buf + n, size - n, "]");
    return buf;
}
