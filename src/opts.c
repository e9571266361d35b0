/* opts.c -- version check of public option structs (see opts.h). */
#include "opts.h"

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
