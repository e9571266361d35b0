/*
 * ckpt.c -- save paths and step directories for `ls`, `prune`, `verify`
 * and `inspect`: listing a save path (steps, sizes, tracker, leftovers),
 * removing a directory tree without following links, and a hostile-input
 * parser of metadata.json for display.
 */
#include "cli.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* Names                                                              */
/* ------------------------------------------------------------------ */

int64_t cli_step_of_name(const char *name)
{
    const char *p;
    if (strncmp(name, "iteration_", 10) == 0)
        p = name + 10;
    else if (strncmp(name, "step-", 5) == 0)
        p = name + 5;
    else
        return -1;
    if (!*p || strlen(p) > 18)
        return -1;
    int64_t v = 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        v = v * 10 + (*p - '0');
    }
    return v;
}

int cli_is_leftover_name(const char *name)
{
    return strncmp(name, ".tmp-", 5) == 0 || strncmp(name, ".trash-", 7) == 0 ||
           strncmp(name, CLI_TRACKER ".tmp.", sizeof CLI_TRACKER + 4) == 0;
}

static int is_regular(const char *dir, const char *name)
{
    char *p = cli_fmt("%s/%s", dir, name);
    struct stat st;
    int ok = p && stat(p, &st) == 0 && S_ISREG(st.st_mode);
    free(p);
    return ok;
}

int cli_is_step_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode) && is_regular(path, "metadata.json");
}

int cli_is_save_path(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode) || cli_is_step_dir(path))
        return 0;
    DIR *d = opendir(path);
    if (!d)
        return 0;
    int found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d))) {
        if (strcmp(e->d_name, CLI_TRACKER) == 0) {
            found = 1;
        } else if (cli_step_of_name(e->d_name) >= 0) {
            char *p = cli_fmt("%s/%s", path, e->d_name);
            found = p && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
            free(p);
        }
    }
    closedir(d);
    return found;
}

/* ------------------------------------------------------------------ */
/* Sizes                                                              */
/* ------------------------------------------------------------------ */

/* Sum the regular files under `path` (not following symbolic links, which
   count as files of their own size; depth-limited). */
static void du(const char *path, int depth, uint64_t *bytes, uint64_t *files,
               uint64_t *shared)
{
    DIR *d = opendir(path);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char *p = cli_fmt("%s/%s", path, e->d_name);
        struct stat st;
        if (p && lstat(p, &st) == 0) {
            if (S_ISDIR(st.st_mode)) {
                if (depth < 16)
                    du(p, depth + 1, bytes, files, shared);
            } else {
                *bytes = cli_add_sat(*bytes, (uint64_t)st.st_size);
                (*files)++;
                if (S_ISREG(st.st_mode) && st.st_nlink > 1)
                    (*shared)++;
            }
        }
        free(p);
    }
    closedir(d);
}

static void measure(cli_entry *en, const char *path)
{
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISDIR(st.st_mode)) {
        en->bytes = (uint64_t)st.st_size;
        en->files = 1;
        en->shared = S_ISREG(st.st_mode) && st.st_nlink > 1;
        return;
    }
    du(path, 0, &en->bytes, &en->files, &en->shared);
}

void cli_du(const char *path, uint64_t *bytes, uint64_t *files, uint64_t *shared)
{
    cli_entry en;
    memset(&en, 0, sizeof en);
    measure(&en, path);
    *bytes = en.bytes;
    *files = en.files;
    *shared = en.shared;
}

/* ------------------------------------------------------------------ */
/* Listing a save path                                                */
/* ------------------------------------------------------------------ */

static int cmp_entry(const void *a, const void *b)
{
    const cli_entry *x = a, *y = b;
    if (x->step != y->step)
        return x->step < y->step ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int push_entry(cli_entry **v, size_t *n, size_t *cap, cli_entry *en)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 16;
        cli_entry *nv = realloc(*v, nc * sizeof *nv);
        if (!nv)
            return -1;
        *v = nv;
        *cap = nc;
    }
    (*v)[(*n)++] = *en;
    return 0;
}

static void read_tracker(cli_save *s)
{
    char *p = cli_fmt("%s/%s", s->path, CLI_TRACKER);
    struct stat st;
    s->tracker = CLI_TRACKER_MISSING;
    if (!p)
        return;
    if (lstat(p, &st) != 0) {
        free(p);
        return;
    }
    s->tracker = CLI_TRACKER_MALFORMED;
    char buf[64];
    ssize_t len = -1;
    int fd = S_ISREG(st.st_mode) ? open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW) : -1;
    if (fd >= 0) {
        len = read(fd, buf, sizeof buf);
        close(fd);
    }
    free(p);
    if (len < 0) {
        snprintf(s->tracker_why, sizeof s->tracker_why, "cannot be read");
        return;
    }
    /* a decimal step (at most 18 digits), optionally followed by one newline */
    size_t i = 0, n = (size_t)len;
    int64_t v = 0;
    for (; i < n && buf[i] >= '0' && buf[i] <= '9' && i < 18; i++)
        v = v * 10 + (buf[i] - '0');
    if (i == 0 || !(i == n || (i + 1 == n && buf[i] == '\n'))) {
        char *e = cli_escape(buf, n > 20 ? 20 : n);
        snprintf(s->tracker_why, sizeof s->tracker_why,
                 "must hold a decimal step, not '%s'", e ? e : "?");
        free(e);
        return;
    }
    s->tracker = CLI_TRACKER_OK;
    s->tracker_step = v;
}

int cli_save_scan(cli_save *s, const char *path)
{
    memset(s, 0, sizeof *s);
    s->path = path;
    s->tracker_step = -1;
    DIR *d = opendir(path);
    if (!d) {
        cli_err("%s: cannot open save path: %s", path, strerror(errno));
        return CLI_FAIL;
    }
    size_t cap_s = 0, cap_l = 0;
    struct dirent *e;
    int oom = 0;
    while (!oom && (e = readdir(d))) {
        int64_t step = cli_step_of_name(e->d_name);
        int left = cli_is_leftover_name(e->d_name);
        if (step < 0 && !left)
            continue;
        cli_entry en;
        memset(&en, 0, sizeof en);
        en.step = step;
        en.name = cli_fmt("%s", e->d_name);
        en.path = cli_fmt("%s/%s", path, e->d_name);
        if (!en.name || !en.path) {
            free(en.name);
            free(en.path);
            oom = 1;
            break;
        }
        struct stat st;
        if (step >= 0) {
            if (stat(en.path, &st) != 0 || !S_ISDIR(st.st_mode)) {
                /* iteration_5 as a plain file: not a step directory */
                free(en.name);
                free(en.path);
                continue;
            }
            en.committed = is_regular(en.path, "metadata.json") &&
                           is_regular(en.path, "common.json");
            measure(&en, en.path);
            if (push_entry(&s->steps, &s->n_steps, &cap_s, &en) < 0)
                oom = 1;
        } else {
            measure(&en, en.path);
            if (push_entry(&s->leftovers, &s->n_leftovers, &cap_l, &en) < 0)
                oom = 1;
        }
        if (oom) {
            free(en.name);
            free(en.path);
        }
    }
    closedir(d);
    if (oom) {
        cli_err("out of memory listing %s", path);
        cli_save_release(s);
        return CLI_FAIL;
    }
    if (s->n_steps > 1)
        qsort(s->steps, s->n_steps, sizeof *s->steps, cmp_entry);
    if (s->n_leftovers > 1)
        qsort(s->leftovers, s->n_leftovers, sizeof *s->leftovers, cmp_entry);
    read_tracker(s);
    if (s->tracker == CLI_TRACKER_OK) {
        for (size_t i = 0; i < s->n_steps; i++)
            if (s->steps[i].step == s->tracker_step && s->steps[i].committed && !s->latest) {
                s->steps[i].latest = 1;
                s->latest = &s->steps[i];
            }
    }
    return CLI_OK;
}

char *cli_save_tracker_problem(const cli_save *s)
{
    switch (s->tracker) {
    case CLI_TRACKER_MISSING:
        return cli_fmt("%s/%s: no tracker (a resume picks the newest committed step)", s->path,
                       CLI_TRACKER);
    case CLI_TRACKER_MALFORMED:
        return cli_fmt("%s/%s: malformed tracker: %s", s->path, CLI_TRACKER, s->tracker_why);
    default:
        if (!s->latest)
            return cli_fmt("%s/%s names step %lld, but there is no complete directory of that "
                           "step (a resume would fail)",
                           s->path, CLI_TRACKER, (long long)s->tracker_step);
        return NULL;
    }
}

void cli_save_release(cli_save *s)
{
    for (size_t i = 0; i < s->n_steps; i++) {
        free(s->steps[i].name);
        free(s->steps[i].path);
    }
    for (size_t i = 0; i < s->n_leftovers; i++) {
        free(s->leftovers[i].name);
        free(s->leftovers[i].path);
    }
    free(s->steps);
    free(s->leftovers);
    s->steps = s->leftovers = NULL;
    s->n_steps = s->n_leftovers = 0;
}

/* ------------------------------------------------------------------ */
/* Removing                                                           */
/* ------------------------------------------------------------------ */

static int rmtree_at(int parent, const char *name, int depth, char *why, size_t cap)
{
    struct stat st;
    if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT)
            return 0;
        snprintf(why, cap, "%s: %s", name, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        if (unlinkat(parent, name, 0) != 0 && errno != ENOENT) {
            snprintf(why, cap, "%s: %s", name, strerror(errno));
            return -1;
        }
        return 0;
    }
    if (depth > 64) {
        snprintf(why, cap, "%s: directory tree too deep", name);
        return -1;
    }
    int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, cap, "%s: %s", name, strerror(errno));
        return -1;
    }
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        snprintf(why, cap, "%s: %s", name, strerror(errno));
        return -1;
    }
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (rmtree_at(dirfd(d), e->d_name, depth + 1, why, cap) < 0)
            rc = -1;
    }
    closedir(d);
    if (rc == 0 && unlinkat(parent, name, AT_REMOVEDIR) != 0 && errno != ENOENT) {
        snprintf(why, cap, "%s: %s", name, strerror(errno));
        rc = -1;
    }
    return rc;
}

int cli_rmtree(const char *path, char *why, size_t cap)
{
    return rmtree_at(AT_FDCWD, path, 0, why, cap);
}

void cli_random_suffix(char out[17])
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, GRND_NONBLOCK) != (ssize_t)sizeof v) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        v = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40);
    }
    snprintf(out, 17, "%016llx", (unsigned long long)v);
}

/* ------------------------------------------------------------------ */
/* metadata.json for display                                          */
/* ------------------------------------------------------------------ */

#define META_MAX ((size_t)1 << 30)

json_t *cli_load_json(const char *path, size_t max, char **why)
{
    *why = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        *why = cli_fmt("%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        *why = cli_fmt("%s: not a regular file", path);
        return NULL;
    }
    if ((uint64_t)st.st_size > max) {
        close(fd);
        *why = cli_fmt("%s: larger than %zu bytes", path, max);
        return NULL;
    }
    size_t len = (size_t)st.st_size, got = 0;
    char *buf = malloc(len + 1);
    if (!buf) {
        close(fd);
        *why = cli_fmt("%s: out of memory", path);
        return NULL;
    }
    while (got < len) {
        ssize_t r = read(fd, buf + got, len - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    json_error_t jerr;
    json_t *root = json_loadb(buf, got, JSON_REJECT_DUPLICATES, &jerr);
    free(buf);
    if (!root)
        *why = cli_fmt("%s: invalid JSON at line %d: %s", path, jerr.line, jerr.text);
    return root;
}

static int plain_file_name(const char *s)
{
    if (!*s || *s == '.' || strlen(s) > 255)
        return 0;
    for (const char *p = s; *p; p++)
        if (*p == '/' || *p == '\\' || (unsigned char)*p < 0x20)
            return 0;
    return 1;
}

/* a non-negative JSON integer */
static int get_u64(json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return -1;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

static int cmp_tensor(const void *a, const void *b)
{
    const cli_mtensor *x = a, *y = b;
    if (x->kind != y->kind)
        return x->kind < y->kind ? -1 : 1;
    return strcmp(x->name, y->name);
}

#define BAD(...)                                                                              \
    do {                                                                                      \
        *why = cli_fmt(__VA_ARGS__);                                                          \
        goto fail;                                                                            \
    } while (0)

int cli_meta_load(cli_meta *m, const char *dir, char **why)
{
    memset(m, 0, sizeof *m);
    *why = NULL;
    char *path = cli_fmt("%s/metadata.json", dir);
    if (!path) {
        *why = cli_fmt("out of memory");
        return CLI_FAIL;
    }
    json_t *root = cli_load_json(path, META_MAX, why);
    if (!root)
        goto fail;
    m->root = root;
    if (!json_is_object(root))
        BAD("%s: not a JSON object", path);
    json_t *fmt = json_object_get(root, "format");
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), "shardsafe.checkpoint") != 0)
        BAD("%s: \"format\" must be \"shardsafe.checkpoint\"", path);
    uint64_t step, ws;
    if (get_u64(json_object_get(root, "step"), &step) ||
        get_u64(json_object_get(root, "world_size"), &ws) || ws < 1 || ws > (1u << 24))
        BAD("%s: \"step\" and \"world_size\" must be non-negative integers (world_size >= 1)",
            path);
    m->step = (int64_t)step;
    m->world_size = ws;
    json_t *files = json_object_get(root, "files");
    if (!json_is_array(files))
        BAD("%s: \"files\" must be an array", path);
    m->n_files = json_array_size(files);
    m->files = calloc(m->n_files + 1, sizeof *m->files);
    if (!m->files)
        BAD("%s: out of memory", path);
    for (size_t i = 0; i < m->n_files; i++) {
        json_t *f = json_array_get(files, i);
        json_t *name = json_object_get(f, "name");
        uint64_t rank;
        if (!json_is_object(f) || !json_is_string(name) ||
            get_u64(json_object_get(f, "rank"), &rank) || rank >= ws)
            BAD("%s: files[%zu] needs a string \"name\" and a \"rank\" below world_size", path,
                i);
        const char *nm = json_string_value(name);
        if (strlen(nm) != json_string_length(name) || !plain_file_name(nm))
            BAD("%s: files[%zu]: '%s' is not a plain file name inside the checkpoint directory",
                path, i, nm);
        m->files[i].name = nm;
        m->files[i].rank = rank;
        char *fp = cli_fmt("%s/%s", dir, nm);
        struct stat st;
        m->files[i].size = fp && stat(fp, &st) == 0 ? (int64_t)st.st_size : -1;
        free(fp);
    }
    json_t *tensors = json_object_get(root, "tensors");
    if (!json_is_object(tensors))
        BAD("%s: \"tensors\" must be an object", path);
    m->tensors = calloc(json_object_size(tensors) + 1, sizeof *m->tensors);
    if (!m->tensors)
        BAD("%s: out of memory", path);
    const char *tname;
    json_t *tv;
    json_object_foreach(tensors, tname, tv) {
        cli_mtensor *t = &m->tensors[m->n_tensors++];
        t->name = tname;
        json_t *kind = json_object_get(tv, "kind"), *dt = json_object_get(tv, "dtype");
        json_t *shape = json_object_get(tv, "shape"), *chunks = json_object_get(tv, "chunks");
        if (!json_is_object(tv) || !json_is_string(kind) || !json_is_string(dt) ||
            !json_is_array(shape) || !json_is_array(chunks))
            BAD("%s: tensor '%s' needs \"kind\", \"dtype\", \"shape\" and \"chunks\"", path,
                tname);
        if (strcmp(json_string_value(kind), "model") == 0)
            t->kind = 0;
        else if (strcmp(json_string_value(kind), "opt") == 0)
            t->kind = 1;
        else
            BAD("%s: tensor '%s': unknown kind '%s'", path, tname, json_string_value(kind));
        const char *ds = json_string_value(dt);
        if (shs_dtype_parse(&t->dtype, ds, json_string_length(dt)) < 0)
            BAD("%s: tensor '%s': unknown dtype '%s'", path, tname, ds);
        t->shape = shape;
        if (json_array_size(shape) > SHS_MAX_DIMS)
            BAD("%s: tensor '%s': more than %d dimensions", path, tname, SHS_MAX_DIMS);
        for (size_t d = 0; d < json_array_size(shape); d++) {
            uint64_t v;
            if (get_u64(json_array_get(shape, d), &v))
                BAD("%s: tensor '%s': shape must hold non-negative integers", path, tname);
        }
        t->n_chunks = json_array_size(chunks);
        for (size_t k = 0; k < t->n_chunks; k++) {
            json_t *c = json_array_get(chunks, k);
            json_t *br = json_object_get(c, "byte_range");
            uint64_t b0, b1, file;
            if (!json_is_object(c) || get_u64(json_object_get(c, "file"), &file) ||
                file >= m->n_files || !json_is_array(br) || json_array_size(br) != 2 ||
                get_u64(json_array_get(br, 0), &b0) || get_u64(json_array_get(br, 1), &b1) ||
                b1 < b0)
                BAD("%s: tensor '%s': chunk %zu needs a valid \"file\" and \"byte_range\"", path,
                    tname, k);
            t->bytes = cli_add_sat(t->bytes, b1 - b0);
        }
        m->total_bytes = cli_add_sat(m->total_bytes, t->bytes);
        m->n_kind[t->kind]++;
    }
    if (m->n_tensors > 1)
        qsort(m->tensors, m->n_tensors, sizeof *m->tensors, cmp_tensor);
    json_t *blobs = json_object_get(root, "blobs");
    if (blobs && !json_is_null(blobs) && !json_is_array(blobs))
        BAD("%s: \"blobs\" must be an array", path);
    m->n_blobs = json_is_array(blobs) ? json_array_size(blobs) : 0;
    m->blobs = calloc(m->n_blobs + 1, sizeof *m->blobs);
    if (!m->blobs)
        BAD("%s: out of memory", path);
    for (size_t i = 0; i < m->n_blobs; i++) {
        json_t *b = json_array_get(blobs, i);
        json_t *name = json_object_get(b, "name"), *br = json_object_get(b, "byte_range");
        uint64_t rank, b0, b1;
        if (!json_is_object(b) || !json_is_string(name) ||
            get_u64(json_object_get(b, "rank"), &rank) || rank >= ws || !json_is_array(br) ||
            json_array_size(br) != 2 || get_u64(json_array_get(br, 0), &b0) ||
            get_u64(json_array_get(br, 1), &b1) || b1 < b0)
            BAD("%s: blobs[%zu] needs a string \"name\", a \"rank\" below world_size and a "
                "valid \"byte_range\"",
                path, i);
        m->blobs[i].name = json_string_value(name);
        m->blobs[i].name_len = json_string_length(name);
        m->blobs[i].rank = rank;
        m->blobs[i].bytes = b1 - b0;
    }
    free(path);
    return CLI_OK;
fail:
    if (!*why)
        *why = cli_fmt("%s: out of memory", path ? path : dir);
    free(path);
    cli_meta_release(m);
    return CLI_FAIL;
}

void cli_meta_release(cli_meta *m)
{
    free(m->files);
    free(m->tensors);
    free(m->blobs);
    json_decref(m->root);
    memset(m, 0, sizeof *m);
}
