/*
 * export.c -- export at train end (torchtitan's last_save_in_hf and
 * export_dtype): after shs_manager_finish's final save, the committed
 * step is merged into the Hugging Face layout beside the step
 * directories, <save_path>/hf-<step dir name>.  The work is shs_merge's:
 * on N ranks each rank writes part rank/N (whole files), then rank 0
 * gathers the parts and writes the index (shs_merge_finish).  Every step
 * ends in an agreement, so all ranks return the same outcome.
 */
#include "manager/manager_int.h"

#include "dist/comm.h"
#include "store/io.h"
#include "tools/merge.h"
#include "source/stepdir.h"

#include <stdio.h>
#include <string.h>

/* ---- the export ---- */

int shs__export_check_config(const shs_config *cfg, int has_key, int *dtype)
{
    *dtype = -1;
    const char *d = cfg->export_dtype ? cfg->export_dtype : "";
    if (*d) {
        shs_dtype t;
        if (shs_dtype_parse_alias(&t, d) < 0)
            return shs__err(SHS_ECONFIG, "export_dtype: unknown dtype '%s'", d);
        *dtype = (int)t;
    }
    if (cfg->last_save_in_hf && has_key)
        return shs__err(SHS_ECONFIG, "last_save_in_hf cannot be combined with encryption "
                                     "(encrypt_key_file / encrypt_key_env): the export would "
                                     "be written in plaintext");
    return SHS_OK;
}

/* Rank 0, after a failed split export: the part directories go (a part
   that failed left none; the others are useless without it). */
static void remove_parts(const char *dst, int count)
{
    for (int i = 0; i < count; i++) {
        char *p = shs__merge_part_dir(dst, i, count);
        if (p)
            shs__rmtree(p);
        shs__free(p);
    }
}

/* The merge of this rank (its part with several ranks), agreed on. */
static int export_parts(shs_manager *m, const char *src, const char *dst, shs_merge_opts *o)
{
    shs_comm *c = m->comm;
    char msg[900];
    if (c->size > 1) {
        o->part_index = c->rank;
        o->part_count = c->size;
    }
    int rc = shs_merge(NULL, src, dst, o);
    snprintf(msg, sizeof msg, "%s", rc < 0 ? shs_last_error() : "");
    rc = shs__comm_agree(c, rc, msg);
    if (rc < 0 || c->size == 1)
        return rc;
    /* every part is written: rank 0 gathers them and writes the index */
    if (c->rank == 0)
        rc = shs_merge_finish(NULL, src, dst, o);
    snprintf(msg, sizeof msg, "%s", rc < 0 ? shs_last_error() : "");
    return shs__comm_agree(c, rc, msg);
}

int shs__manager_export(shs_manager *m, int64_t step)
{
    char name[64];
    shs__export_dir_name(name, sizeof name, step);
    char *src = shs__step_dir_path(m->save_path, step);
    char *dst = shs__path_join(m->save_path, name);
    char msg[900];
    int rc = src && dst ? SHS_OK : shs__err(SHS_ENOMEM, "out of memory");
    snprintf(msg, sizeof msg, "%s", rc < 0 ? shs_last_error() : "");
    /* out of memory here is this rank's: the others hear of it */
    if ((rc = shs__comm_agree(m->comm, rc, msg)) == SHS_OK) {
        shs_merge_opts o = SHS_MERGE_OPTS_INIT;
        o.flags = SHS_MERGE_FORCE | (m->cfg.fsync ? SHS_MERGE_FSYNC : 0u);
        o.dtype = m->export_dtype;
        rc = export_parts(m, src, dst, &o);
        if (rc < 0 && m->comm->size > 1 && m->comm->rank == 0)
            remove_parts(dst, m->comm->size);
    }
    if (rc < 0) {
        char what[4200];
        snprintf(what, sizeof what, "export of step %lld to %s failed", (long long)step,
                 dst ? dst : name);
        rc = shs__err_prefix(rc, what);
    } else {
        snprintf(m->export_dir, sizeof m->export_dir, "%s", dst);
    }
    shs__free(src);
    shs__free(dst);
    return rc;
}

const char *shs_manager_export_dir(const shs_manager *m)
{
    return m && m->export_dir[0] ? m->export_dir : NULL;
}
