/*
 * store_lease.c -- one writer per location where there is no lock: a
 * lease object.  Object storage has no lock a process holds until it
 * dies, so a holder writes an object that says until when it holds, and
 * renews it while it runs.
 *
 * Generations.  The lease `name` is the objects "name/<20 digits>"; the
 * highest generation present is the lease.  Taking it: none present ->
 * create generation 1; one present and expired -> create the next
 * generation.  Both are create-only puts, so of two takers racing one
 * wins and the other meets SHS_EEXIST and reads the winner.  There is no
 * conditional overwrite or delete in S3 to take over in place, hence new
 * generations; the older ones are deleted after a takeover.
 *
 * Clock.  Expiry times are written and compared on the store's clock
 * (shs__store_now: the S3 server's Date), so hosts whose clocks differ
 * agree on when a lease expired.
 *
 * What it does not promise: a holder that stops renewing for longer than
 * the ttl (a frozen VM) may find at its next renewal that it was taken
 * over (shs__lease_renew says so: SHS_ELOCKED).  The commit point of a
 * save is its create-only manifest put, which does not depend on the
 * lease: two writers never both commit one step.
 */
#include "store/store_int.h"

#include "store/lock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LEASE_MAX 4096
#define GEN_DIGITS 20

struct shs__lease {
    shs__store *st;
    char *name;
    uint64_t gen;
    int ttl;
    int64_t since, expires;
    char token[33];
    char key[300];
};

static int gen_key(char *buf, size_t cap, const char *name, uint64_t gen)
{
    int n = snprintf(buf, cap, "%s/%020llu", name, (unsigned long long)gen);
    return n > 0 && (size_t)n < cap ? SHS_OK : shs__err(SHS_EINVAL, "lease name too long");
}

/* The highest generation of lease `name`: 0 when none. */
static int top_gen(shs__store *st, const char *name, uint64_t *gen, uint64_t **all, size_t *nall)
{
    char pre[300];
    shs__store_listing l;
    size_t nl = strlen(name);
    *gen = 0;
    if (all)
        *all = NULL, *nall = 0;
    if (nl + 2 > sizeof pre)
        return shs__err(SHS_EINVAL, "lease name too long");
    snprintf(pre, sizeof pre, "%s/", name);
    int rc = shs__store_list(st, pre, 0, &l);
    if (rc < 0)
        return rc;
    if (all && l.n && !(*all = shs__calloc(l.n, sizeof **all)))
        rc = shs__err(SHS_ENOMEM, "out of memory");
    for (size_t i = 0; i < l.n && rc == SHS_OK; i++) {
        const char *g = l.names[i] + nl + 1;
        /* anything else under the name is not ours to interpret */
        if (strlen(g) != GEN_DIGITS || strspn(g, "0123456789") != GEN_DIGITS)
            continue;
        uint64_t v = strtoull(g, NULL, 10);
        if (v > *gen)
            *gen = v;
        if (all)
            (*all)[(*nall)++] = v;
    }
    shs__store_list_release(&l);
    return rc;
}

static int64_t field_i64(const char *text, const char *key)
{
    char v[32];
    shs__lock_info_field(v, sizeof v, text, key);
    if (!v[0] || strlen(v) > 18 || strspn(v, "0123456789") != strlen(v))
        return -1;
    return (int64_t)strtoll(v, NULL, 10);
}

/* Fill h from a lease object's text. */
static void parse_lease(shs_lock_holder *h, const char *text, int64_t now, int64_t *expires,
                        char token[33])
{
    memset(h, 0, sizeof *h);
    h->pid = field_i64(text, "pid");
    shs__lock_info_field(h->host, sizeof h->host, text, "host");
    shs__lock_info_field(h->since, sizeof h->since, text, "since");
    int64_t exp = field_i64(text, "expires");
    if (token)
        shs__lock_info_field(token, 33, text, "token");
    *expires = exp;
    h->held = exp >= 0 && now < exp;
    char left[64] = "";
    if (h->held)
        snprintf(left, sizeof left, ", lease expires in %lld s", (long long)(exp - now));
    else if (exp >= 0)
        snprintf(left, sizeof left, ", lease expired %lld s ago", (long long)(now - exp));
    snprintf(h->text, sizeof h->text, "pid %lld on host %s since %s%s", (long long)h->pid,
             h->host[0] ? h->host : "?", h->since[0] ? h->since : "?", left);
}

static int write_lease(shs__lease *l, unsigned flags)
{
    char host[256], text[600], since[32];
    struct tm tm;
    time_t s = (time_t)l->since;
    if (gethostname(host, sizeof host) != 0)
        snprintf(host, sizeof host, "?");
    host[sizeof host - 1] = '\0';
    if (!gmtime_r(&s, &tm) || !strftime(since, sizeof since, "%Y-%m-%dT%H:%M:%SZ", &tm))
        snprintf(since, sizeof since, "?");
    int n = snprintf(text, sizeof text, "pid %lld\nhost %s\nsince %s\nexpires %lld\ntoken %s\n",
                     (long long)getpid(), host, since, (long long)l->expires, l->token);
    if (n < 0 || (size_t)n >= sizeof text)
        n = (int)strlen(text);
    return shs__store_put(l->st, l->key, text, (size_t)n, flags | SHS__STORE_FSYNC);
}

int shs__lease_holder(shs_lock_holder *out, shs__store *st, const char *name)
{
    uint64_t gen;
    char key[300], *text = NULL;
    size_t len;
    int64_t exp;
    memset(out, 0, sizeof *out);
    out->pid = -1;
    snprintf(out->text, sizeof out->text, "nobody");
    int rc = top_gen(st, name, &gen, NULL, NULL);
    if (rc < 0 || gen == 0)
        return rc;
    if ((rc = gen_key(key, sizeof key, name, gen)) < 0)
        return rc;
    rc = shs__store_read_all(st, key, LEASE_MAX, &text, &len);
    if (rc == SHS_ENOENT) {
        shs__err_clear();
        return SHS_OK; /* released meanwhile */
    }
    if (rc == SHS_OK)
        parse_lease(out, text, shs__store_now(st), &exp, NULL);
    shs__free(text);
    return rc;
}

static void lease_free(shs__lease *l)
{
    if (!l)
        return;
    shs__free(l->name);
    shs__free(l);
}

int shs__lease_take(shs__lease **out, shs__store *st, const char *name, int ttl_s)
{
    char nm[600];
    *out = NULL;
    if (ttl_s < 1)
        return shs__err(SHS_EINVAL, "lease ttl of %d s", ttl_s);
    int rc = shs__store_key_check(name, 0);
    if (rc < 0)
        return rc;
    shs__lease *l = shs__calloc(1, sizeof *l);
    if (!l || !(l->name = shs__strdup(name))) {
        lease_free(l);
        return shs__err(SHS_ENOMEM, "out of memory");
    }
    l->st = st;
    l->ttl = ttl_s;
    if ((rc = shs__store_attempt_id(l->token)) < 0)
        goto fail;
    /* a few rounds: each lost race means someone else moved first */
    for (int round = 0; round < 4; round++) {
        uint64_t gen;
        shs_lock_holder h;
        if ((rc = top_gen(st, name, &gen, NULL, NULL)) < 0)
            goto fail;
        if (gen) {
            char key[300], *text = NULL;
            size_t len;
            int64_t exp;
            if ((rc = gen_key(key, sizeof key, name, gen)) < 0)
                goto fail;
            rc = shs__store_read_all(st, key, LEASE_MAX, &text, &len);
            if (rc == SHS_ENOENT) {
                shs__err_clear();
                continue; /* released meanwhile: look again */
            }
            if (rc < 0)
                goto fail;
            parse_lease(&h, text, shs__store_now(st), &exp, NULL);
            shs__free(text);
            if (h.held) {
                rc = shs__err(SHS_ELOCKED,
                              "%s is locked by %s: another job writes there (lease %s)",
                              st->location, h.text, shs__store_name(nm, sizeof nm, st, key));
                goto fail;
            }
        }
        l->gen = gen + 1;
        if ((rc = gen_key(l->key, sizeof l->key, name, l->gen)) < 0)
            goto fail;
        l->since = shs__store_now(st);
        l->expires = l->since + ttl_s;
        rc = write_lease(l, SHS__STORE_CREATE_ONLY);
        if (rc == SHS_EEXIST) {
            shs__err_clear();
            continue; /* another taker won this generation */
        }
        if (rc < 0)
            goto fail;
        /* ours: the generations before are history */
        for (uint64_t g = gen; g > 0 && g + 8 > gen; g--) {
            char old[300];
            if (gen_key(old, sizeof old, name, g) == SHS_OK)
                shs__store_delete(st, old);
        }
        shs__err_clear();
        *out = l;
        return SHS_OK;
    }
    rc = shs__err(SHS_ELOCKED, "%s: lease '%s' changed hands repeatedly while taking it",
                  st->location, name);
fail:
    lease_free(l);
    return rc;
}

/* SHS_OK when generation l->gen is still the top one and holds our token. */
static int still_ours(shs__lease *l)
{
    uint64_t gen;
    char *text = NULL, token[33];
    size_t len;
    int64_t exp;
    shs_lock_holder h;
    int rc = top_gen(l->st, l->name, &gen, NULL, NULL);
    if (rc < 0)
        return rc;
    if (gen != l->gen) {
        char key[300];
        h.text[0] = '\0';
        if (gen > l->gen && gen_key(key, sizeof key, l->name, gen) == SHS_OK &&
            shs__store_read_all(l->st, key, LEASE_MAX, &text, &len) == SHS_OK)
            parse_lease(&h, text, shs__store_now(l->st), &exp, NULL);
        shs__free(text);
        return shs__err(SHS_ELOCKED, "%s: lease lost: taken over by %s", l->st->location,
                        h.text[0] ? h.text : "another job");
    }
    if ((rc = shs__store_read_all(l->st, l->key, LEASE_MAX, &text, &len)) < 0) {
        if (rc == SHS_ENOENT)
            rc = shs__err(SHS_ELOCKED, "%s: lease lost: its object is gone", l->st->location);
        return rc;
    }
    parse_lease(&h, text, shs__store_now(l->st), &exp, token);
    shs__free(text);
    if (strcmp(token, l->token) != 0)
        return shs__err(SHS_ELOCKED, "%s: lease lost: now held by %s", l->st->location, h.text);
    return SHS_OK;
}

int shs__lease_renew(shs__lease *l)
{
    int rc = still_ours(l);
    if (rc < 0)
        return rc;
    int64_t before = l->expires;
    l->expires = shs__store_now(l->st) + l->ttl;
    if ((rc = write_lease(l, 0)) < 0)
        l->expires = before;
    return rc;
}

int64_t shs__lease_remaining(shs__lease *l)
{
    return l->expires - shs__store_now(l->st);
}

int shs__lease_release(shs__lease *l)
{
    if (!l)
        return SHS_OK;
    int rc = still_ours(l);
    if (rc == SHS_OK)
        rc = shs__store_delete(l->st, l->key);
    else if (rc == SHS_ELOCKED)
        rc = SHS_OK; /* not ours any more: nothing to give up */
    lease_free(l);
    return rc;
}
