/*
 * save.c -- one step directory saved: every rank writes its files
 * (incremental saves hard-link unchanged ones), the root merges the
 * metadata and commits.  Format: docs/checkpoint.md.
 *
 * Commit protocol (every step a crash may interrupt leaves the previous
 * committed checkpoint loadable and the tracker pointing at a complete
 * directory):
 *   1. every file goes into <save_path>/.tmp-iteration_N-<random>/, each
 *      fsynced; metadata.json is written last; the directory is fsynced;
 *   2. the directory is renamed to iteration_N (or swapped atomically with
 *      an existing iteration_N by RENAME_EXCHANGE, the old one deleted;
 *      without RENAME_EXCHANGE, see commit_two_renames); save_path is
 *      fsynced;
 *   3. the tracker is replaced atomically (temp file, fsync, rename, fsync).
 * Leftovers (.tmp-*, .trash-*) are removed by the next run's manager, which
 * first restores a .replaced- step (a re-save cut between its renames).
 */
#include "checkpoint/save_local.h"

#include "source/common_json.h"
#include "crypto/crypt.h"
#include "dist/exchange.h"
#include "common/hash.h"
#include "store/io.h"
#include "tools/layout_spec.h"
#include "source/meta.h"
#include "source/stepdir.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Without RENAME_EXCHANGE (NFS, Lustre, CIFS) a re-save takes two
   renames, target -> .replaced-iteration_N-<random>, then tmp -> target.
   Between them the step has no name; a crash there leaves the old copy
   whole under the .replaced- name, which the next cleanup
   (shs__clean_leftovers) renames back since iteration_N is absent.  Once
   the new copy is in place (and durable), the old one is renamed to a
   .trash- name before it is deleted: a half-deleted directory must never
   carry a name that cleanup would restore. */
static int commit_two_renames(const char *tmp, const char *target, const char *save_path,
                              int64_t step, int do_fsync)
{
    int rc = SHS_OK;
    char *replaced = shs__replaced_path(save_path, step);
    if (!replaced)
        return shs__err(SHS_ENOMEM, "out of memory");
    if (shs__io->rename(target, replaced) != 0) {
        rc = shs__err_errno(errno, "cannot replace", target);
        goto done;
    }
    if (shs__io->rename(tmp, target) != 0) {
        rc = shs__err_errno(errno, "cannot rename into place", target);
        /* put the old one back; if even that fails, cleanup will */
        shs__io->rename(replaced, target);
        goto done;
    }
    if (do_fsync && (rc = shs__io_fsync_dir(save_path)) < 0)
        goto done; /* the .replaced- stays: the new copy may not be durable */
    shs__discard(save_path, replaced);
done:
    shs__free(replaced);
    return rc;
}

static int commit_dir(const char *tmp, const char *target, const char *save_path, int64_t step,
                      int do_fsync)
{
    int r = shs__entry_exists(target);
    if (r < 0)
        return r;
    if (r) {
        /* same step saved again: swap atomically, make the swap durable,
           then drop the old one */
        if (shs__io->exchange(tmp, target) == 0) {
            int rc = do_fsync ? shs__io_fsync_dir(save_path) : SHS_OK;
            int r2 = shs__rmtree(tmp);
            return rc < 0 ? rc : r2;
        }
        if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
            return shs__err_errno(errno, "cannot replace", target);
        return commit_two_renames(tmp, target, save_path, step, do_fsync);
    }
    if (shs__io->rename(tmp, target) != 0)
        return shs__err_errno(errno, "cannot rename into place", target);
    return do_fsync ? shs__io_fsync_dir(save_path) : SHS_OK;
}


/* Root: merge the ranks' fragments (texts, in rank order) into the body
   of metadata.json, remapping file indices; the boxes each rank holds
   ("held") go to `held` for the recorded layout. */
static int merge_fragments(json_t *out, json_t *held, const char *texts, const size_t *lens,
                           int world, const char *save_path, const char *key_id)
{
    json_t *files = json_object_get(out, "files"), *tensors = json_object_get(out, "tensors");
    json_t *blobs = json_object_get(out, "blobs");
    size_t at = 0;
    int rc = SHS_OK;
    for (int r = 0; r < world && rc == SHS_OK; r++) {
        json_error_t jerr;
        int oom = 0;
        json_t *f = shs__json_loadb(texts + at, lens[r], JSON_REJECT_DUPLICATES, &jerr, &oom);
        at += lens[r];
        if (oom)
            return shs__err(SHS_ENOMEM, "%s: out of memory reading the metadata of rank %d",
                            save_path, r);
        if (!f)
            return shs__err(SHS_ECORRUPT, "%s: metadata of rank %d is invalid: %s", save_path, r,
                            jerr.text);
        /* one key for the whole checkpoint: the root's */
        const char *kid = json_string_value(json_object_get(f, "key_id"));
        if ((kid || key_id) && (!kid || !key_id || strcmp(kid, key_id) != 0)) {
            rc = shs__err(SHS_EKEY,
                          "%s: rank %d saves with encryption key id %s, rank 0 with %s: every "
                          "rank must use the same key",
                          save_path, r, kid ? kid : "(none)", key_id ? key_id : "(none)");
            json_decref(f); /* after the message: kid is f's */
            return rc;
        }
        json_int_t base = (json_int_t)json_array_size(files);
        size_t i;
        json_t *v;
        json_array_foreach(json_object_get(f, "files"), i, v) if (json_array_append(files, v) < 0)
            rc = shs__err(SHS_ENOMEM, "out of memory");
        const char *name;
        json_object_foreach(json_object_get(f, "tensors"), name, v)
        {
            json_t *chunks = json_object_get(v, "chunks"), *c;
            json_array_foreach(chunks, i, c) json_object_set_new(
                c, "file", json_integer(json_integer_value(json_object_get(c, "file")) + base));
            json_t *have = json_object_get(tensors, name);
            if (!have) {
                if (json_object_set(tensors, name, v) < 0)
                    rc = shs__err(SHS_ENOMEM, "out of memory");
                continue;
            }
            if (!json_equal(json_object_get(have, "kind"), json_object_get(v, "kind")) ||
                !json_equal(json_object_get(have, "dtype"), json_object_get(v, "dtype")) ||
                !json_equal(json_object_get(have, "shape"), json_object_get(v, "shape"))) {
                rc = shs__err(SHS_EMISMATCH,
                              "tensor '%s': rank %d registers another kind, dtype or global "
                              "shape than a lower rank",
                              name, r);
                break;
            }
            if (json_array_extend(json_object_get(have, "chunks"), chunks) < 0)
                rc = shs__err(SHS_ENOMEM, "out of memory");
        }
        json_array_foreach(json_object_get(f, "blobs"), i, v)
        {
            json_object_set_new(
                v, "file", json_integer(json_integer_value(json_object_get(v, "file")) + base));
            if (json_array_append(blobs, v) < 0)
                rc = shs__err(SHS_ENOMEM, "out of memory");
        }
        if (rc == SHS_OK)
            rc = shs__layout_collect(held, json_object_get(f, "held"), r);
        json_decref(f);
    }
    return rc;
}

int shs__save_meta(const shs__save_req *req, const char *tmp, const char *texts, const size_t *lens,
                   int world)
{
    int rc;
    char *text = NULL, *mpath = NULL;
    json_t *held = json_object();
    json_t *root = json_pack(
        "{s:s, s:i, s:I, s:i, s:[], s:{}, s:[]}", "format", "shardsafe.checkpoint", "version",
        req->key ? SHS__META_VERSION_STREAM : SHS__META_VERSION, "step", (json_int_t)req->step,
        "world_size", world, "files", "tensors", "blobs");
    if (!root || !held) {
        rc = shs__err(SHS_ENOMEM, "out of memory writing metadata.json");
        goto done;
    }
    /* weights only: auto-resume prefers an earlier full step over it */
    if (!req->with_optim && json_object_set_new(root, "model_only", json_true()) < 0) {
        rc = shs__err(SHS_ENOMEM, "out of memory writing metadata.json");
        goto done;
    }
    /* encrypted (crypt.h): the cipher, the key's id, the save's id and the
       segment size, then each chunk's salt and tags (from the fragments);
       the text is authenticated under the key when it is sealed */
    if (req->key &&
        (json_object_set_new(root, "cipher", json_string(SHS__CIPHER_STREAM)) < 0 ||
         json_object_set_new(root, "key_id", json_string(req->key->id)) < 0 ||
         json_object_set_new(root, "save_id", json_string(req->save_id)) < 0 ||
         json_object_set_new(root, "segment_bytes", json_integer((json_int_t)SHS__SEGMENT)) < 0)) {
        rc = shs__err(SHS_ENOMEM, "out of memory writing metadata.json");
        goto done;
    }
    if ((rc = merge_fragments(root, held, texts, lens, world, req->save_path,
                              req->key ? req->key->id : NULL)) < 0 ||
        (rc = shs__layout_record(root, held, world)) < 0)
        goto done;
    /* version 2: common.json's checksum (of the bytes just written), and
       metadata.json sealed by its own ("metadata_xxh3", the last key) */
    uint64_t common_hash = 0;
    char hx[17];
    if ((rc = shs__common_write(&common_hash, tmp, req->progress, req->fsync)) < 0)
        goto done;
    shs__hex64(hx, common_hash);
    if (json_object_set_new(root, "common_xxh3", json_string(hx)) < 0) {
        rc = shs__err(SHS_ENOMEM, "out of memory writing metadata.json");
        goto done;
    }
    /* metadata.json is written last: a directory holding it is complete */
    char *plain = shs__json_dumps(root, JSON_INDENT(1) | JSON_COMPACT);
    size_t tlen = 0;
    rc = plain ? SHS_OK : shs__err(SHS_ENOMEM, "out of memory writing metadata.json");
    if (plain && req->key)
        rc = shs__crypt_meta_seal(&text, &tlen, plain, strlen(plain), req->key);
    else if (plain && !(text = shs__meta_seal(plain, strlen(plain), &tlen)))
        rc = shs__err(SHS_ENOMEM, "out of memory writing metadata.json");
    shs__free(plain);
    if (rc < 0)
        goto done;
    if (!(mpath = shs__path_join(tmp, "metadata.json"))) {
        rc = shs__err(SHS_ENOMEM, "out of memory writing metadata.json");
        goto done;
    }
    if ((rc = shs__write_file(mpath, text, tlen, req->fsync)) < 0)
        goto done;
    /* what is committed must load: the one validation of metadata.json
       (chunks of every tensor tiling it, ...) runs before the commit, so
       ranks registering an incomplete or overlapping layout fail the save */
    shs__meta check;
    if ((rc = shs__meta_parse(&check, tmp, 0)) < 0) {
        shs__err_prefix(rc, "nothing committed: the ranks' layout is not a valid checkpoint");
        goto done;
    }
    rc = shs__crypt_check_key(&check, req->key, tmp);
    shs__meta_free(&check);
    if (rc < 0)
        goto done;
    if (req->fsync)
        rc = shs__io_fsync_dir(tmp);
done:
    shs__free(text);
    json_decref(root);
    json_decref(held);
    shs__free(mpath);
    return rc;
}

/* Root: common.json, metadata.json, then the commit protocol. */
static int root_commit(const shs__save_req *req, const char *tmp, const char *texts,
                       const size_t *lens, int world, char *out_dir, size_t out_cap, int *committed)
{
    int rc;
    char *target = shs__step_dir_path(req->save_path, req->step);
    char *tracker = shs__tracker_path(req->save_path);
    *committed = 0;
    if (!target || !tracker) {
        rc = shs__err(SHS_ENOMEM, "out of memory writing metadata.json");
        goto done;
    }
    if ((rc = shs__save_meta(req, tmp, texts, lens, world)) < 0)
        goto done;
    /* commit: the directory, then the tracker */
    if ((rc = commit_dir(tmp, target, req->save_path, req->step, req->fsync)) < 0)
        goto done;
    *committed = 1;
    if ((rc = shs__write_tracker(tracker, req->step, req->fsync)) < 0) {
        /* the directory is complete and committed; the tracker names the
           previous step (or, if only the final directory fsync failed, this
           one): either way it names a complete directory */
        shs__err_prefix(rc, "step directory committed; updating the tracker failed");
        goto done;
    }
    if (out_dir)
        snprintf(out_dir, out_cap, "%s", target);
done:
    shs__free(target);
    shs__free(tracker);
    return rc;
}

int shs__ckpt_save(const shs_state *st, const shs__save_req *req, shs_comm *comm,
                   shs_save_stats *stats, char *out_dir, size_t out_cap)
{
    const int root = 0, me = comm->rank, world = comm->size;
    char suffix[17] = { 0 }, name[64], msg[256], dname[40];
    char *tmp = NULL, *text = NULL, *all = NULL;
    size_t *lens = NULL;
    uint64_t *written = NULL;
    json_t *frag = NULL;
    int rc = SHS_OK, committed = 0;
    shs_save_stats s = { 0 };

    /* the loader finds steps by directory names of at most 18 digits */
    if (req->step < 0 || req->step >= SHS__STEP_LIMIT)
        return shs__err(SHS_EINVAL,
                        "cannot save step %lld: steps must be from 0 to "
                        "999999999999999999 (the step directory name holds 18 digits)",
                        (long long)req->step);
    /* the root creates the temporary directory and names it for all */
    /* encrypted: the suffix is also the save's id in every chunk's AAD
       (crypt.h), so it comes from the cryptographic generator */
    if (me == root && (!req->key || shs__crypt_save_id(suffix) < 0))
        shs__random_suffix(suffix);
    if ((rc = shs__comm_bcast(comm, suffix, sizeof suffix, root)) < 0)
        return rc;
    suffix[16] = '\0';
    shs__save_req rq = *req;
    rq.save_id = suffix;
    req = &rq;
    shs__step_dir_name(dname, sizeof dname, req->step);
    snprintf(name, sizeof name, SHS__TMP_PREFIX "%s-%s", dname, suffix);
    if (!(tmp = shs__path_join(req->save_path, name)))
        rc = shs__err(SHS_ENOMEM, "out of memory");
    if (me == root && rc == SHS_OK && (rc = shs__mkdirs(req->save_path, 0755)) == SHS_OK &&
        shs__io->mkdir(tmp, 0755) != 0)
        rc = shs__err_errno(errno, "cannot create", tmp);
    snprintf(msg, sizeof msg, "%s", shs_last_error());
    if ((rc = shs__comm_agree(comm, rc, msg)) < 0)
        goto fail;

    /* every rank writes its own files */
    uint8_t *skip = NULL;
    if (world > 1 && req->remove_redundancy)
        rc = shs__plan_replicas(st, req, comm, &skip);
    if (rc == SHS_OK)
        rc = shs__save_local(st, req, tmp, skip, &frag, &s);
    if (!req->layout_cache)
        shs__free(skip);
    if (rc == SHS_OK && !(text = shs__json_dumps(frag, JSON_COMPACT)))
        rc = shs__err(SHS_ENOMEM, "out of memory");
    /* allocated before the agreement: no rank may fail alone between the
       collectives below */
    if (rc == SHS_OK && !(written = shs__calloc((size_t)world, sizeof *written)))
        rc = shs__err(SHS_ENOMEM, "out of memory");
    snprintf(msg, sizeof msg, "%s", shs_last_error());
    /* commit only if every rank succeeded; else every rank hears who failed */
    rc = shs__comm_agree(comm, rc, msg);
    /* the agreement fails a rank whose own status failed; said again here
       for static analyzers, which do not follow it into comm.c */
    if (rc >= 0 && (!text || !written))
        rc = shs__err(SHS_ENOMEM, "out of memory");
    if (rc < 0)
        goto fail;
    if ((rc = shs__comm_gather_bytes(comm, text, strlen(text), root, &all, &lens)) < 0)
        goto fail;
    /* balance of the written bytes over the ranks */
    if ((rc = shs__comm_allgather(comm, &s.bytes_written, 8, written)) < 0)
        goto fail;
    uint64_t sum = 0;
    for (int r = 0; r < world; r++) {
        sum += written[r];
        if (written[r] > s.max_rank_bytes)
            s.max_rank_bytes = written[r];
    }
    s.write_balance = sum ? (double)s.max_rank_bytes * world / (double)sum : 1.0;
    if (me == root)
        rc = root_commit(req, tmp, all, lens, world, out_dir, out_cap, &committed);
    snprintf(msg, sizeof msg, "%s", shs_last_error());
    int agreed = shs__comm_agree(comm, me == root ? rc : SHS_OK, msg);
    if (me == root && rc < 0 && !committed)
        shs__rmtree(tmp);
    if (agreed < 0) {
        rc = agreed;
        goto done;
    }
    if (me != root && out_dir)
        snprintf(out_dir, out_cap, "%s/%s", req->save_path, dname);
    if (stats)
        *stats = s;
    goto done;
fail:
    if (me == root && tmp)
        shs__rmtree(tmp);
done:
    shs__free(text);
    shs__free(written);
    json_decref(frag);
    shs__free(all);
    shs__free(lens);
    shs__free(tmp);
    return rc;
}
