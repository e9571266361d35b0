/* opts.c -- version check of public option structs (see opts.h). */
#include "common/opts.h"

int shs__check_progress(const shs_progress *p, const char *what)
{
    if (p->version == 0 || p->version > SHS_PROGRESS_VERSION)
        return shs__err(SHS_EINVAL,
                        "%s: shs_progress version %u (this library knows 1 to %u): initialise it "
                        "with SHS_PROGRESS_INIT",
                        what, p->version, SHS_PROGRESS_VERSION);
    return SHS_OK;
}

int shs__check_opts_version(unsigned have, unsigned max, const char *what)
{
    if (have == 0)
        return shs__err(SHS_EINVAL,
                        "%s: option struct version 0: initialise the struct with its "
                        "*_INIT macro",
                        what);
    if (have > max)
        return shs__err(SHS_EINVAL, "%s: option struct version %u is newer than this library (%u)",
                        what, have, max);
    return SHS_OK;
}
