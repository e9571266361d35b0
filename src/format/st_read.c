/*
 * st_read.c -- the safetensors reader's file handle: checks 1-3 of the
 * order in st_parse.h, open (the header read with pread, the data mapped
 * but not touched), tensor and metadata lookup, reads and slices.  The
 * header itself is checked by st_header.c.
 */
#include "store/io.h"
#include "format/layout.h"
#include "common/opts.h"
#include "format/st_parse.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_HEADER 100000000ull

/* Name a foreign format from the first bytes, or NULL. */
static const char *sniff_foreign(const uint8_t *b, uint64_t len)
{
    if (len >= 7 && memcmp(b, "version", 7) == 0)
        return "a git-LFS pointer file, not the data (run 'git lfs pull')";
    if (len >= 4 && memcmp(b, "PK\x03\x04", 4) == 0)
        return "a zip archive (a PyTorch torch.save checkpoint?), not safetensors";
    if (len >= 2 && b[0] == 0x80 && b[1] >= 2 && b[1] <= 5)
        return "a Python pickle (torch.save legacy format?), not safetensors";
    if (len >= 4 && memcmp(b, "GGUF", 4) == 0)
        return "a GGUF file, not safetensors";
    if (len >= 8 && memcmp(b, "\x89HDF\r\n\x1a\n", 8) == 0)
        return "an HDF5 file, not safetensors";
    if (len >= 6 && memcmp(b, "\x93NUMPY", 6) == 0)
        return "a NumPy .npy file, not safetensors";
    return NULL;
}

/* Checks 2-4 and the parse; `head` holds at least min(len, 8) bytes. */
static int check_header(shs_file *f, const uint8_t *prefix, size_t prefix_len, const char *fname)
{
    if (f->file_size < 8) {
        const char *what = sniff_foreign(prefix, prefix_len);
        if (what)
            return shs__err(SHS_EWRONG_FORMAT, "%s: this is %s", fname, what);
        return shs__err(SHS_EHEADER_TOO_SMALL,
                        "%s: file has %llu bytes, a safetensors file has at least 8", fname,
                        (unsigned long long)f->file_size);
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | prefix[i];
    f->header_len = n;
    int rc = SHS_OK;
    if (n > MAX_HEADER)
        rc = shs__err(SHS_EHEADER_TOO_LARGE,
                      "%s: header length %llu is larger than the limit of 100000000", fname,
                      (unsigned long long)n);
    else if (n + 8 > f->file_size)
        rc = shs__err(SHS_EHEADER_LENGTH,
                      "%s: header length %llu runs past the end of the %llu-byte file", fname,
                      (unsigned long long)n, (unsigned long long)f->file_size);
    if (rc < 0) {
        const char *what = sniff_foreign(prefix, prefix_len);
        if (what)
            return shs__err(SHS_EWRONG_FORMAT, "%s: this is %s", fname, what);
    }
    return rc;
}

/* The __metadata__ key that marks a data file of an encrypted save
   (SHS__FILE_MARK in crypt.h): its tensors are ciphertext. */
#define SEALED_MARK "shardsafe_cipher"

void shs__file_allow_sealed(shs_file *f)
{
    f->sealed_ok = 1;
}

/* Tensor data of an encrypted file is refused to every reader but the
   loader of its checkpoint (load.c), which has the key and the tags. */
static int sealed_refused(const shs_file *f)
{
    if (!f->sealed || f->sealed_ok)
        return SHS_OK;
    return shs__err(SHS_EKEY,
                    "%s: encrypted (its header says \"" SEALED_MARK "\": \"%s\"): its tensors are "
                    "ciphertext, read only through the metadata.json of its checkpoint with the "
                    "key",
                    f->path, shs_file_metadata_get(f, SEALED_MARK));
}

static shs_file *file_new(const char *name)
{
    shs_file *f = shs__calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->fd = -1;
    f->path = shs__strdup(name);
    if (!f->path) {
        shs__free(f);
        return NULL;
    }
    return f;
}

int shs_file_open_memory(shs_file **out, const void *data, size_t len, const char *name)
{
    int rc;
    if (!out)
        return shs__err(SHS_EINVAL, "shs_file_open_memory: out is NULL");
    *out = NULL;
    if (!data && len)
        return shs__err(SHS_EINVAL, "shs_file_open_memory: data is NULL");
    shs__err_clear();
    shs_file *f = file_new(name ? name : "<memory>");
    if (!f)
        return shs__err(SHS_ENOMEM, "out of memory opening %s", name ? name : "<memory>");
    f->map = data;
    f->map_len = len;
    f->file_size = len;
    uint8_t prefix[8] = { 0 };
    if (len)
        memcpy(prefix, data, len < 8 ? len : 8);
    if ((rc = check_header(f, len >= 16 ? data : prefix, len, f->path)) < 0)
        goto fail;
    f->header = (const char *)data + 8;
    if ((rc = shs__st_parse_header(f, f->path)) < 0)
        goto fail;
    f->sealed = shs_file_metadata_get(f, SEALED_MARK) != NULL;
    *out = f;
    return SHS_OK;
fail:
    shs_file_free(f);
    return rc;
}

int shs_file_open(shs_file **out, const char *path, const shs_open_opts *opts)
{
    int rc;
    struct stat st;
    uint8_t prefix[16] = { 0 };
    if (!out || !path)
        return shs__err(SHS_EINVAL, "shs_file_open: out or path is NULL");
    *out = NULL;
    shs__err_clear();
    if (opts && (rc = shs__check_version(opts, SHS__V_OPEN_OPTS, "shs_file_open")) < 0)
        return rc;
    shs_open_opts oo = SHS_OPEN_OPTS_INIT;
    if (opts)
        shs__copy_in(&oo, opts, SHS__V_OPEN_OPTS);
    unsigned flags = oo.flags;
    shs_file *f = file_new(path);
    if (!f)
        return shs__err(SHS_ENOMEM, "out of memory opening %s", path);
    /* O_NONBLOCK: opening a FIFO must not hang; it is rejected below */
    if ((rc = shs__io_open(&f->fd, path,
                           O_RDONLY | O_NONBLOCK | ((flags & SHS_OPEN_NO_FOLLOW) ? O_NOFOLLOW : 0),
                           0)) < 0)
        goto fail;
    if (shs__io->fstat(f->fd, &st) != 0) {
        rc = shs__err_errno(errno, "cannot stat", path);
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = shs__err(SHS_EINVAL, "%s: %s, not a safetensors file", path,
                      S_ISDIR(st.st_mode) ? "is a directory"
                                          : "not a regular file (a FIFO, device or socket)");
        goto fail;
    }
    f->file_size = (uint64_t)st.st_size;
    size_t plen = f->file_size < sizeof prefix ? (size_t)f->file_size : sizeof prefix;
    if ((rc = shs__io_pread_full(f->fd, prefix, plen, 0, path)) < 0)
        goto fail;
    if ((rc = check_header(f, prefix, plen, path)) < 0)
        goto fail;
    /* The header is read with pread (one call, O(header)); the data is
       mapped but not touched. */
    f->header_copy = shs__malloc(f->header_len + 1);
    if (!f->header_copy) {
        rc = shs__err(SHS_ENOMEM, "%s: out of memory for a %llu-byte header", path,
                      (unsigned long long)f->header_len);
        goto fail;
    }
    if ((rc = shs__io_pread_full(f->fd, f->header_copy, f->header_len, 8, path)) < 0)
        goto fail;
    f->header = f->header_copy;
    if ((rc = shs__st_parse_header(f, path)) < 0)
        goto fail;
    f->sealed = shs_file_metadata_get(f, SEALED_MARK) != NULL;
    if (!(flags & SHS_OPEN_NO_MMAP) && f->file_size > 0 && f->file_size <= (uint64_t)SIZE_MAX) {
        void *m;
        if (!(flags & SHS_OPEN_PRIVATE_WRITABLE))
            m = shs__io->mmap(f->fd, (size_t)f->file_size);
        else if (shs__io->mmap_private_writable)
            m = shs__io->mmap_private_writable(f->fd, (size_t)f->file_size);
        else
            m = NULL; /* a test layer without it: read with pread */
        if (m) {
            f->map = m;
            f->map_len = (size_t)f->file_size;
            f->owns_map = 1;
        }
    }
    *out = f;
    return SHS_OK;
fail:
    shs_file_free(f);
    return rc;
}

void shs_file_free(shs_file *f)
{
    if (!f)
        return;
    if (f->owns_map && f->map)
        shs__io->munmap((void *)f->map, f->map_len);
    if (f->fd >= 0)
        shs__io->close(f->fd);
    shs__free(f->path);
    shs__free(f->header_copy);
    shs__free(f->arena);
    shs__free(f->shapes);
    shs__free(f->tensors);
    shs__free(f->meta);
    shs__namemap_release(&f->names);
    shs__free(f);
}

const char *shs_file_path(const shs_file *f)
{
    return f->path;
}
uint64_t shs_file_size(const shs_file *f)
{
    return f->file_size;
}
uint64_t shs_file_header_len(const shs_file *f)
{
    return f->header_len;
}
uint64_t shs_file_data_start(const shs_file *f)
{
    return 8 + f->header_len;
}
const char *shs_file_header(const shs_file *f)
{
    return f->header;
}
size_t shs_file_tensor_count(const shs_file *f)
{
    return f->n_tensors;
}
int shs_file_has_metadata(const shs_file *f)
{
    return f->has_meta;
}
size_t shs_file_metadata_count(const shs_file *f)
{
    return f->n_meta;
}

const shs_tensor_info *shs_file_tensor(const shs_file *f, size_t index)
{
    return index < f->n_tensors ? &f->tensors[index].info : NULL;
}

int shs_file_find_n(size_t *out_index, const shs_file *f, const char *name, size_t len)
{
    long i = shs__namemap_find(&f->names, name, len, shs__st_tensor_name, f->tensors);
    if (i < 0)
        return shs__err(SHS_ENOTFOUND, "%s: no tensor named '%.*s'", f->path,
                        len > 200 ? 200 : (int)len, name);
    *out_index = (size_t)i;
    return SHS_OK;
}

int shs_file_find(size_t *out_index, const shs_file *f, const char *name)
{
    return shs_file_find_n(out_index, f, name, strlen(name));
}

int shs_file_metadata_at_n(const char **out_key, size_t *out_key_len, const char **out_value,
                           size_t *out_value_len, const shs_file *f, size_t index)
{
    if (index >= f->n_meta)
        return shs__err(SHS_ERANGE, "%s: metadata index %zu out of range", f->path, index);
    *out_key = f->meta[index].key;
    *out_key_len = f->meta[index].key_len;
    *out_value = f->meta[index].value;
    *out_value_len = f->meta[index].value_len;
    return SHS_OK;
}

int shs_file_metadata_at(const char **out_key, const char **out_value, const shs_file *f,
                         size_t index)
{
    size_t kl, vl;
    return shs_file_metadata_at_n(out_key, &kl, out_value, &vl, f, index);
}

const char *shs_file_metadata_get_n(const shs_file *f, const char *key, size_t key_len,
                                    size_t *out_value_len)
{
    if (f->n_meta == 0)
        return NULL;
    shs__st_meta probe = { key, NULL, key_len, 0 };
    const shs__st_meta *e = bsearch(&probe, f->meta, f->n_meta, sizeof *f->meta, shs__st_cmp_meta);
    if (e && out_value_len)
        *out_value_len = e->value_len;
    return e ? e->value : NULL;
}

const char *shs_file_metadata_get(const shs_file *f, const char *key)
{
    return shs_file_metadata_get_n(f, key, strlen(key), NULL);
}

const void *shs_file_tensor_data(const shs_file *f, size_t index)
{
    if (!f->map || index >= f->n_tensors || (f->sealed && !f->sealed_ok))
        return NULL;
    return f->map + 8 + f->header_len + f->tensors[index].info.offset;
}

int shs_file_read_bytes(const shs_file *f, size_t index, uint64_t offset, void *dst, size_t len)
{
    int rc = sealed_refused(f);
    if (rc < 0)
        return rc;
    if (index >= f->n_tensors)
        return shs__err(SHS_ERANGE, "%s: tensor index %zu out of range", f->path, index);
    const shs_tensor_info *t = &f->tensors[index].info;
    if (offset > t->nbytes || len > t->nbytes - offset)
        return shs__err(SHS_ERANGE, "%s: tensor '%s': bytes [%llu, +%zu) outside its %llu bytes",
                        f->path, t->name, (unsigned long long)offset, len,
                        (unsigned long long)t->nbytes);
    uint64_t pos = 8 + f->header_len + t->offset + offset;
    if (f->map) {
        memcpy(dst, f->map + pos, len);
        return SHS_OK;
    }
    return shs__io_pread_full(f->fd, dst, len, pos, f->path);
}

int shs_file_read(const shs_file *f, size_t index, void *dst, size_t dst_len)
{
    if (index >= f->n_tensors)
        return shs__err(SHS_ERANGE, "%s: tensor index %zu out of range", f->path, index);
    const shs_tensor_info *t = &f->tensors[index].info;
    if (dst_len < t->nbytes)
        return shs__err(SHS_ERANGE, "%s: tensor '%s' has %llu bytes, buffer holds %zu", f->path,
                        t->name, (unsigned long long)t->nbytes, dst_len);
    return shs_file_read_bytes(f, index, 0, dst, (size_t)t->nbytes);
}

typedef struct slice_ctx {
    const shs_file *f;
    size_t index;
    char *dst;
} slice_ctx;

static int slice_run(void *ctx, uint64_t src_off, uint64_t dst_off, uint64_t len)
{
    slice_ctx *c = ctx;
    return shs_file_read_bytes(c->f, c->index, src_off, c->dst + dst_off, (size_t)len);
}

int shs_file_read_slice(const shs_file *f, size_t index, const uint64_t *start,
                        const uint64_t *count, void *dst, size_t dst_len)
{
    if (index >= f->n_tensors)
        return shs__err(SHS_ERANGE, "%s: tensor index %zu out of range", f->path, index);
    const shs_tensor_info *t = &f->tensors[index].info;
    uint64_t need;
    int rc = sealed_refused(f);
    if (rc < 0)
        return rc;
    rc = shs__box_check(&need, t->dtype, t->ndim, t->shape, start, count);
    if (rc < 0)
        return shs__err_prefix(rc, f->path);
    if (need > dst_len)
        return shs__err(SHS_ERANGE, "%s: tensor '%s': slice needs %llu bytes, buffer holds %zu",
                        f->path, t->name, (unsigned long long)need, dst_len);
    slice_ctx c = { f, index, dst };
    return shs__box_runs(t->dtype, t->ndim, t->shape, start, count, slice_run, &c);
}
