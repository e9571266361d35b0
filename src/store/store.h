/*
 * store.h -- where the bytes of checkpoints live: a local directory or an
 * S3 bucket and prefix ("s3://bucket/prefix").  The checkpoint engine
 * asks a store for objects by key -- a '/'-separated name relative to the
 * location, such as "iteration_00000010/metadata.json" -- and never needs
 * to know which kind it talks to, except for the local rename protocol
 * (shs__store_local_dir).
 *
 * Keys.  A key is 1 to 1024 bytes of printable text, '/'-separated into
 * components of at most 200 bytes; no component is empty, "." or "..",
 * no key starts with '/', and no key holds a '%', a backslash, a control
 * character, or the local backend's temporary marker ".shs-tmp-".  A key
 * that breaks a rule is SHS_EINVAL naming it, before any request: keys
 * read from a listing or a manifest are hostile input.
 *
 * Ownership.  A store owns its location, its S3 client (unless given
 * one) and nothing the caller passes; what a function returns through an
 * out-parameter is the caller's (release functions below).  Buffers
 * passed to reads and puts stay the caller's and are not kept.
 *
 * Thread safety.  A store may be used from many threads at once (each
 * call is independent; the S3 client shares connections under a lock).
 * An upload handle belongs to one thread at a time.
 *
 * Consistency.
 *   local: POSIX.  A put or a committed upload appears whole (temporary
 *     file beside it, renamed or linked into place); with
 *     SHS__STORE_FSYNC the file and its directory are fsynced first, so
 *     it survives a power loss.  Listings show regular files only (no
 *     links, no temporaries of puts in flight), and empty directories
 *     as prefixes with a delimiter.
 *   S3: what the server gives.  AWS S3 (since December 2020) and Ceph
 *     radosgw give read-after-write for PUT, DELETE and LIST; an object
 *     appears whole or not at all (a multipart upload only at its
 *     completion); a create-only PUT (If-None-Match: *) is decided by
 *     the server, atomically.  SHS__STORE_FSYNC means nothing there: a
 *     2xx answer is durable.  Servers that ignore If-None-Match exist:
 *     such a server makes create-only puts plain puts (docs/s3.md).
 */
#ifndef SHS_STORE_H
#define SHS_STORE_H

#include "common/internal.h"

typedef struct shs__store shs__store;
struct shs__s3;

/* Open a location: "s3://bucket/prefix" (the S3 client configured from
   the environment, s3.h) or a local directory (which need not exist yet:
   the first put creates it).  The prefix of an s3:// location follows
   the key rules; a trailing '/' is dropped. */
int shs__store_open(shs__store **out, const char *location);
/* The same for an s3:// location with a client of the caller's (kept,
   not owned: it must outlive the store). */
int shs__store_open_s3(shs__store **out, const char *location, struct shs__s3 *s3);
void shs__store_close(shs__store *st);

/* 1 for "s3://..." locations. */
int shs__is_s3_location(const char *location);
int shs__store_is_s3(const shs__store *st);
/* The location as opened (no trailing '/'), for messages. */
const char *shs__store_location(const shs__store *st);
/* The S3 client of an s3:// store, NULL for a local one. */
struct shs__s3 *shs__store_s3(const shs__store *st);

/* SHS_OK when `key` follows the rules above, else SHS_EINVAL naming it
   and the rule.  A prefix (is_prefix) may also be empty or end with '/'. */
int shs__store_key_check(const char *key, int is_prefix);

/* The size of the object `key`; SHS_ENOENT when there is none. */
int shs__store_head(shs__store *st, const char *key, uint64_t *size);

/* Read bytes [off, off + len) of `key` into buf.  Past the end of the
   object: SHS_ERANGE.  len 0 reads nothing (and does not check that the
   object exists). */
int shs__store_read(shs__store *st, const char *key, uint64_t off, void *buf, size_t len);

/* Many ranged reads at once (S3: in parallel, each retried alone; local:
   one after the other).  The first failure is returned; each range's own
   outcome is in its status. */
typedef struct shs__store_range {
    const char *key;
    uint64_t off;
    void *buf;
    size_t len;
    int status;
} shs__store_range;
int shs__store_read_many(shs__store *st, shs__store_range *r, size_t n);

/* A whole small object (at most `max` bytes: SHS_ECORRUPT when larger)
   in a NUL-terminated buffer the caller frees with shs__free. */
int shs__store_read_all(shs__store *st, const char *key, size_t max, char **out, size_t *out_len);

/* The keys under `prefix` (a string prefix of keys, "" for all), sorted
   bytewise, with their sizes.  With `delimited`, keys holding a '/' past
   the prefix are folded into "directories" (dirs: prefix up to and with
   that '/', sorted), as S3's delimiter does. */
typedef struct shs__store_listing {
    char **names;
    uint64_t *sizes;
    size_t n;
    char **dirs;
    size_t ndirs;
} shs__store_listing;
int shs__store_list(shs__store *st, const char *prefix, int delimited, shs__store_listing *out);
void shs__store_list_release(shs__store_listing *l);

/* Flags of puts and uploads. */
enum {
    SHS__STORE_CREATE_ONLY = 1, /* SHS_EEXIST when the key exists */
    SHS__STORE_FSYNC = 2        /* local: durable before the call returns */
};

/* Put a whole object from memory (replacing any of that key, unless
   SHS__STORE_CREATE_ONLY). */
int shs__store_put(shs__store *st, const char *key, const void *data, size_t len, unsigned flags);

/* A large object written front to back, in bounded memory.
   local: a temporary file beside the key, written as it comes; commit =
     fsync (SHS__STORE_FSYNC) + rename + fsync of the directory.
   S3: a multipart upload whose parts go up in the background while the
     caller writes (memory: (SHS_S3_PARALLEL + 1) x SHS_S3_PART_SIZE at most);
     an object smaller than one part is one PUT at commit.
   Nothing is visible under `key` before the commit succeeds.  Commit and
   abort free the handle whatever happens; abort leaves nothing behind
   (no temporary file, no open multipart upload).  size_hint: expected
   size (0 unknown); SHS__STORE_CREATE_ONLY is not supported here. */
typedef struct shs__store_upload shs__store_upload;
int shs__store_upload_begin(shs__store_upload **out, shs__store *st, const char *key,
                            uint64_t size_hint, unsigned flags);
int shs__store_upload_write(shs__store_upload *u, const void *data, size_t len);
int shs__store_upload_commit(shs__store_upload *u);
void shs__store_upload_abort(shs__store_upload *u);

/* Delete `key`; an absent key is not an error. */
int shs__store_delete(shs__store *st, const char *key);
/* Delete every object under `prefix` (non-empty; local: the files, then
   the directories left empty). */
int shs__store_delete_prefix(shs__store *st, const char *prefix);

/* local only: the directory of the location (NULL for S3), and the path
   of a key in it (newly allocated), for the rename protocol of local
   saves, which goes through io.h itself. */
const char *shs__store_local_dir(const shs__store *st);
char *shs__store_local_path(const shs__store *st, const char *key);

/* ---- pieces of the S3 commit protocol (docs/s3.md) ---- */

/* A fresh attempt id: 32 hex digits from the cryptographic generator,
   so that two attempts -- of any host, any process -- never share a
   prefix ("<step>.attempt-<id>/"). */
int shs__store_attempt_id(char out[33]);

/* The commit point: put `data` under `key` create-only.  SHS_OK when it
   is ours -- put now, or found there with exactly these bytes (a retry
   after an answer lost, or the same attempt committing twice);
   SHS_EEXIST, naming the key, when another writer's object is there. */
int shs__store_commit_put(shs__store *st, const char *key, const void *data, size_t len);

/* The clock leases are measured on, seconds since the epoch: the S3
   server's (the Date of its answers) or, for a local store, this host's. */
int64_t shs__store_now(shs__store *st);

/* A lease: a lock for stores without locks.  The holder's object under
   `name` ("name/<generation>") says pid, host, start time and expiry
   (on shs__store_now's clock); it is created create-only, renewed by
   its holder, and taken over by another only after it expired (by
   creating the next generation, create-only: one taker wins).  Its
   error names the holder as the local lock's does. */
typedef struct shs__lease shs__lease;
/* Take the lease for ttl_s seconds.  SHS_ELOCKED naming the holder when
   another holds an unexpired one. */
int shs__lease_take(shs__lease **out, shs__store *st, const char *name, int ttl_s);
/* Push the expiry ttl_s from now.  SHS_ELOCKED when the lease was taken
   over meanwhile (this holder must stop writing). */
int shs__lease_renew(shs__lease *l);
/* Seconds until the lease expires, as last written. */
int64_t shs__lease_remaining(shs__lease *l);
/* Give the lease up (delete its object if still ours) and free l. */
int shs__lease_release(shs__lease *l);
/* Who holds the lease `name`, without taking it: held 1 while unexpired. */
int shs__lease_holder(shs_lock_holder *out, shs__store *st, const char *name);

#endif
