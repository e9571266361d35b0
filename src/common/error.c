/* error.c -- status strings and the thread-local error message. */
#include "common/internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define MSG_MAX 1024

static _Thread_local char t_msg[MSG_MAX];

const char *shs_version(void)
{
    return SHS_VERSION_STRING;
}

unsigned shs_version_number(void)
{
    return SHS_VERSION_NUMBER;
}

const char *shs_strerror(int status)
{
    switch (status) {
    case SHS_OK: return "success";
    case SHS_ENOMEM: return "out of memory";
    case SHS_EIO: return "I/O error";
    case SHS_EINVAL: return "invalid argument";
    case SHS_ENOENT: return "no such file or directory";
    case SHS_ENOTFOUND: return "not found";
    case SHS_ERANGE: return "out of range";
    case SHS_ENOSPC: return "no space left on device";
    case SHS_ESTATE: return "call not valid in this state";
    case SHS_EUNSUPPORTED: return "not supported";
    case SHS_EHEADER_TOO_SMALL: return "file too small for a header (< 8 bytes)";
    case SHS_EHEADER_TOO_LARGE: return "header length too large (> 100000000)";
    case SHS_EHEADER_LENGTH: return "header extends past end of file";
    case SHS_EUTF8: return "header is not valid UTF-8";
    case SHS_EJSON: return "header is not valid JSON";
    case SHS_ENESTING: return "header JSON nested too deeply";
    case SHS_ESCHEMA: return "header is not a safetensors header";
    case SHS_EDTYPE: return "unknown dtype";
    case SHS_EDUPLICATE: return "duplicate key in header";
    case SHS_EOFFSET: return "invalid data_offsets";
    case SHS_EOVERFLOW: return "tensor size overflows";
    case SHS_EMISALIGNED: return "tensor size is not a whole number of bytes";
    case SHS_ETENSOR_SIZE: return "data_offsets do not match shape and dtype";
    case SHS_ETRAILING: return "data does not end at end of file";
    case SHS_EWRONG_FORMAT: return "not a safetensors file";
    case SHS_ECONVERT: return "unsupported dtype conversion";
    case SHS_ECONFIG: return "invalid configuration";
    case SHS_ECHECKSUM: return "checksum mismatch";
    case SHS_ECORRUPT: return "checkpoint is corrupt or inconsistent";
    case SHS_EMISMATCH: return "checkpoint does not match the registered state";
    case SHS_ENOCHECKPOINT: return "no checkpoint found";
    case SHS_ELOCKED: return "save path is locked by another writer";
    case SHS_EKEY: return "encryption key missing, wrong or malformed";
    case SHS_EEXIST: return "already exists";
    default: return "unknown status";
    }
}

const char *shs_last_error(void)
{
    return t_msg;
}

void shs__err_clear(void)
{
    t_msg[0] = '\0';
}

int shs__verr(int status, const char *fmt, va_list ap)
{
    vsnprintf(t_msg, sizeof t_msg, fmt, ap);
    /* Messages quote names from untrusted files: never let them carry
       terminal control sequences to whoever prints the message. */
    for (char *p = t_msg; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = '?';
    return status;
}

int shs__err_prefix(int status, const char *prefix)
{
    size_t plen = strlen(prefix) + 2, mlen = strlen(t_msg);
    if (plen >= MSG_MAX)
        plen = MSG_MAX - 1;
    if (plen + mlen >= MSG_MAX)
        mlen = MSG_MAX - 1 - plen;
    memmove(t_msg + plen, t_msg, mlen);
    t_msg[plen + mlen] = '\0';
    memcpy(t_msg, prefix, plen - 2);
    memcpy(t_msg + plen - 2, ": ", plen >= 2 ? 2 : 0);
    return status;
}

int shs__err_errno(int err, const char *what, const char *path)
{
    int status;
    switch (err) {
    case ENOENT: status = SHS_ENOENT; break;
    case ENOSPC:
    case EDQUOT: status = SHS_ENOSPC; break;
    case ENOMEM: status = SHS_ENOMEM; break;
    case EINVAL: status = SHS_EINVAL; break;
    default: status = SHS_EIO; break;
    }
    return shs__err(status, "%s '%s': %s", what, path ? path : "", strerror(err));
}
