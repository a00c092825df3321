/* zip.c - the zip container of torch.save files, read and written.
 *
 * What torch.save writes (PyTorch's serialization.py over miniz) and what is
 * read here, all little-endian:
 *   per entry: local header  "PK\3\4" ver flags method=0 time date crc csize usize
 *                            namelen extralen | name | extra (padding so the
 *                            data starts at a multiple of 64) | data (stored)
 *              [data descriptor "PK\7\8" crc csize usize when flags bit 3]
 *   central directory: one "PK\1\2" record per entry (46 bytes + name + extra +
 *                      comment) with the real crc, sizes and local offset
 *   [zip64 end record "PK\6\6" and locator "PK\6\7"] end record "PK\5\6".
 * Entries: ARCHIVE/data.pkl, ARCHIVE/data/KEY (raw storages), ARCHIVE/version.
 *
 * Deliberately not here: compression (torch never compresses), encryption,
 * multi-disk archives, zip64 on write (exports past 4 GiB are refused). */
#define _POSIX_C_SOURCE 200809L
#include "format/torch.h"

#include "base/base.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_ENTRIES (1 << 20)

static uint32_t rd16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t rd32(const uint8_t *p) { return rd16(p) | rd16(p + 2) << 16; }
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }

/* Whether [off, off+n) lies inside an archive of `size` bytes. */
static int inside(uint64_t off, uint64_t n, size_t size) { return off <= size && n <= size - off; }

/* The end records: central directory offset, size and entry count. */
static int find_directory(ptdp__zip *z, uint64_t *cd_off, uint64_t *cd_size, uint64_t *count) {
    const uint8_t *d = z->data;
    if (z->size < 22)
        return ptdp_errorf(PTDP_EFORMAT,
                           "%s: %zu bytes is too short for a zip archive (a truncated file?)",
                           z->what, z->size);
    size_t lo = z->size > 22 + 65535 ? z->size - 22 - 65535 : 0;
    size_t e = z->size - 22 + 1;
    while (e-- > lo)
        if (rd32(d + e) == 0x06054b50 && e + 22 + rd16(d + e + 20) == z->size) break;
    if (e < lo || e == (size_t)-1 || rd32(d + e) != 0x06054b50)
        return ptdp_errorf(PTDP_EFORMAT,
                           "%s: no zip end-of-central-directory record: not a torch.save file of "
                           "PyTorch >= 1.6, or truncated",
                           z->what);
    if (rd16(d + e + 4) != 0 || rd16(d + e + 6) != 0)
        return ptdp_errorf(PTDP_EFORMAT, "%s: multi-disk zip archives are not supported", z->what);
    *count = rd16(d + e + 10);
    *cd_size = rd32(d + e + 12);
    *cd_off = rd32(d + e + 16);
    if (*count == 0xffff || *cd_size == 0xffffffffu || *cd_off == 0xffffffffu) {
        if (e < 20 || rd32(d + e - 20) != 0x07064b50)
            return ptdp_errorf(PTDP_EFORMAT, "%s: zip64 sizes without a zip64 locator", z->what);
        uint64_t z64 = rd64(d + e - 20 + 8);
        if (!inside(z64, 56, z->size) || rd32(d + z64) != 0x06064b50)
            return ptdp_errorf(PTDP_EFORMAT, "%s: the zip64 end record is missing or out of range",
                               z->what);
        *count = rd64(d + z64 + 32);
        *cd_size = rd64(d + z64 + 40);
        *cd_off = rd64(d + z64 + 48);
    }
    if (!inside(*cd_off, *cd_size, z->size))
        return ptdp_errorf(PTDP_EFORMAT,
                           "%s: the zip central directory (%llu bytes at %llu) lies outside the "
                           "%zu-byte file (truncated?)",
                           z->what, (unsigned long long)*cd_size, (unsigned long long)*cd_off,
                           z->size);
    if (*count > *cd_size / 46) /* a central record takes at least 46 bytes */
        return ptdp_errorf(PTDP_EFORMAT,
                           "%s: %llu zip entries cannot fit a %llu-byte central directory", z->what,
                           (unsigned long long)*count, (unsigned long long)*cd_size);
    if (*count > MAX_ENTRIES)
        return ptdp_errorf(PTDP_EFORMAT, "%s: %llu zip entries (more than %d)", z->what,
                           (unsigned long long)*count, MAX_ENTRIES);
    return PTDP_OK;
}

/* One central record at *pos: fills en, advances *pos. */
static int read_central(ptdp__zip *z, uint64_t *pos, uint64_t end, ptdp__zip_entry *en) {
    const uint8_t *d = z->data, *c = d + *pos;
    if (*pos + 46 > end || rd32(c) != 0x02014b50)
        return ptdp_errorf(PTDP_EFORMAT, "%s: malformed zip central directory at byte %llu",
                           z->what, (unsigned long long)*pos);
    uint32_t flags = rd16(c + 8), method = rd16(c + 10), nlen = rd16(c + 28), xlen = rd16(c + 30),
             clen = rd16(c + 32);
    uint64_t csize = rd32(c + 20), usize = rd32(c + 24), loff = rd32(c + 42);
    if (*pos + 46 + nlen + xlen + clen > end)
        return ptdp_errorf(PTDP_EFORMAT, "%s: a zip central record runs past the directory",
                           z->what);
    if (nlen == 0 || nlen >= sizeof en->name)
        return ptdp_errorf(PTDP_EFORMAT, "%s: a zip entry name of %u bytes (1..255 allowed)",
                           z->what, nlen);
    memcpy(en->name, c + 46, nlen);
    en->name[nlen] = 0;
    if (memchr(en->name, 0, nlen))
        return ptdp_errorf(PTDP_EFORMAT, "%s: a zip entry name holds a NUL byte", z->what);
    if (method != 0)
        return ptdp_errorf(PTDP_EFORMAT,
                           "%s: zip entry '%s' is compressed (method %u); torch.save stores "
                           "entries uncompressed",
                           z->what, en->name, method);
    if (flags & 1)
        return ptdp_errorf(PTDP_EFORMAT, "%s: zip entry '%s' is encrypted", z->what, en->name);
    /* zip64 extra field: the 8-byte values of the fields that read 0xffffffff */
    for (const uint8_t *x = c + 46 + nlen, *xe = x + xlen; x + 4 <= xe;) {
        uint32_t id = rd16(x), sz = rd16(x + 2);
        if (x + 4 + sz > xe) break;
        if (id == 1) {
            const uint8_t *v = x + 4, *ve = v + sz;
            if (usize == 0xffffffffu && v + 8 <= ve) usize = rd64(v), v += 8;
            if (csize == 0xffffffffu && v + 8 <= ve) csize = rd64(v), v += 8;
            if (loff == 0xffffffffu && v + 8 <= ve) loff = rd64(v), v += 8;
        }
        x += 4 + sz;
    }
    if (csize != usize)
        return ptdp_errorf(PTDP_EFORMAT, "%s: zip entry '%s': stored size %llu != size %llu",
                           z->what, en->name, (unsigned long long)csize, (unsigned long long)usize);
    if (!inside(loff, 30, z->size) || rd32(d + loff) != 0x04034b50)
        return ptdp_errorf(PTDP_EFORMAT, "%s: zip entry '%s': no local header at byte %llu",
                           z->what, en->name, (unsigned long long)loff);
    uint64_t data = loff + 30 + rd16(d + loff + 26) + rd16(d + loff + 28);
    if (!inside(data, usize, z->size))
        return ptdp_errorf(PTDP_EFORMAT,
                           "%s: zip entry '%s' (%llu bytes at %llu) runs past the end of the "
                           "%zu-byte file (truncated?)",
                           z->what, en->name, (unsigned long long)usize, (unsigned long long)data,
                           z->size);
    en->offset = data;
    en->size = usize;
    en->crc = rd32(c + 16);
    *pos += 46 + nlen + xlen + clen;
    return PTDP_OK;
}

int ptdp__zip_open_mem(ptdp__zip *z, const void *data, size_t size, const char *what) {
    memset(z, 0, sizeof *z);
    z->data = data;
    z->size = size;
    snprintf(z->what, sizeof z->what, "%s", what);
    uint64_t cd_off = 0, cd_size = 0, count = 0;
    int rc = find_directory(z, &cd_off, &cd_size, &count);
    if (rc) return rc;
    z->entries = calloc((size_t)count + 1, sizeof *z->entries);
    if (!z->entries) return ptdp_errorf(PTDP_ENOMEM, "out of memory reading %s", what);
    uint64_t pos = cd_off;
    for (uint64_t i = 0; i < count; i++) {
        rc = read_central(z, &pos, cd_off + cd_size, &z->entries[i]);
        if (rc) break;
        z->n++;
        const ptdp__zip_entry *en = &z->entries[i];
        uint32_t crc = ptdp_crc32(0, z->data + en->offset, (size_t)en->size);
        if (crc != en->crc) {
            rc = ptdp_errorf(PTDP_EFORMAT,
                             "%s: zip entry '%s' fails its CRC-32 check (%08x, expected %08x): "
                             "the file is corrupted",
                             what, en->name, crc, en->crc);
            break;
        }
    }
    if (rc) {
        free(z->entries);
        z->entries = NULL;
        z->n = 0;
    }
    return rc;
}

int ptdp__zip_open_file(ptdp__zip *z, const char *path) {
    memset(z, 0, sizeof *z);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return ptdp_errorf(PTDP_EIO, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return ptdp_errorf(PTDP_EIO, "%s: not a regular file", path);
    }
    size_t size = (size_t)st.st_size;
    void *m = size ? mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    close(fd);
    if (size && m == MAP_FAILED)
        return ptdp_errorf(PTDP_EIO, "cannot map %s: %s", path, strerror(errno));
    int rc = ptdp__zip_open_mem(z, m, size, path);
    if (rc) {
        if (size) munmap(m, size);
        memset(z, 0, sizeof *z);
        return rc;
    }
    z->mapped = 1;
    return PTDP_OK;
}

void ptdp__zip_close(ptdp__zip *z) {
    if (!z) return;
    if (z->mapped && z->size) munmap((void *)z->data, z->size);
    free(z->entries);
    memset(z, 0, sizeof *z);
}

const ptdp__zip_entry *ptdp__zip_find(const ptdp__zip *z, const char *suffix) {
    size_t sl = strlen(suffix);
    for (int i = 0; i < z->n; i++) {
        const char *nm = z->entries[i].name, *slash = strchr(nm, '/');
        if (slash && slash != nm && !strcmp(slash + 1, suffix) && strlen(slash + 1) == sl)
            return &z->entries[i];
    }
    return NULL;
}

/* ---- writer ------------------------------------------------------------------- */

struct ptdp__zipw {
    FILE *f;
    char path[4096], tmp[4200];
    uint64_t pos;
    struct {
        char name[256];
        uint32_t crc;
        uint64_t size, local;
    } * ents;
    int n, cap;
    int failed;
};

static void wr16(uint8_t *p, uint32_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8); }
static void wr32(uint8_t *p, uint32_t v) { wr16(p, v & 0xffff), wr16(p + 2, v >> 16); }

static int put(ptdp__zipw *w, const void *p, size_t n) {
    if (n && fwrite(p, 1, n, w->f) != n) {
        w->failed = 1;
        return ptdp_errorf(PTDP_EIO, "cannot write %s: %s", w->tmp, strerror(errno));
    }
    w->pos += n;
    if (w->pos > 0xfffffff0ull) {
        w->failed = 1;
        return ptdp_errorf(PTDP_EUNSUPPORTED,
                           "%s: the file would pass 4 GiB, which needs zip64, not written by ptdp "
                           "yet; export with a larger --tensor-model-parallel-size or "
                           "--pipeline-model-parallel-size so each file stays smaller",
                           w->path);
    }
    return PTDP_OK;
}

int ptdp__zipw_open(ptdp__zipw **out, const char *path) {
    ptdp__zipw *w = calloc(1, sizeof *w);
    *out = NULL;
    if (!w) return ptdp_errorf(PTDP_ENOMEM, "out of memory writing %s", path);
    snprintf(w->path, sizeof w->path, "%s", path);
    snprintf(w->tmp, sizeof w->tmp, "%s.tmp.%ld", path, (long)getpid());
    w->f = fopen(w->tmp, "wb");
    if (!w->f) {
        int rc = ptdp_errorf(PTDP_EIO, "cannot create %s: %s", w->tmp, strerror(errno));
        free(w);
        return rc;
    }
    *out = w;
    return PTDP_OK;
}

int ptdp__zipw_add(ptdp__zipw *w, const char *name, const void *data, size_t n) {
    size_t nlen = strlen(name);
    PTDP_ASSERT(nlen > 0 && nlen < 256);
    if (w->failed) return ptdp_errorf(PTDP_EIO, "%s: an earlier write failed", w->path);
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 16;
        void *e = realloc(w->ents, (size_t)cap * sizeof *w->ents);
        if (!e) return ptdp_errorf(PTDP_ENOMEM, "out of memory writing %s", w->path);
        w->ents = e;
        w->cap = cap;
    }
    uint32_t crc = ptdp_crc32(0, data, n);
    /* pad with an extra field ("FB", as torch) so the data starts at a multiple of 64 */
    uint64_t start = w->pos + 30 + nlen + 4;
    size_t pad = (size_t)((64 - start % 64) % 64);
    uint8_t h[30], x[4 + 64];
    wr32(h, 0x04034b50);
    wr16(h + 4, 20);
    wr16(h + 6, 0);
    wr16(h + 8, 0);
    wr32(h + 10, 0);
    wr32(h + 14, crc);
    wr32(h + 18, (uint32_t)n);
    wr32(h + 22, (uint32_t)n);
    wr16(h + 26, (uint32_t)nlen);
    wr16(h + 28, (uint32_t)(4 + pad));
    wr16(x, 0x4246);
    wr16(x + 2, (uint32_t)pad);
    memset(x + 4, 'Z', pad);
    if (n > 0xfffffff0ull || w->n >= 0xfffe) {
        w->failed = 1;
        return ptdp_errorf(PTDP_EUNSUPPORTED,
                           "%s: entry '%s' would need zip64 (past 4 GiB or 65534 entries), not "
                           "written by ptdp yet; export with larger parallel sizes so each file "
                           "stays smaller",
                           w->path, name);
    }
    uint64_t local = w->pos;
    int rc = put(w, h, 30);
    if (rc == PTDP_OK) rc = put(w, name, nlen);
    if (rc == PTDP_OK) rc = put(w, x, 4 + pad);
    if (rc == PTDP_OK) rc = put(w, data, n);
    if (rc) return rc;
    snprintf(w->ents[w->n].name, sizeof w->ents[w->n].name, "%s", name);
    w->ents[w->n].crc = crc;
    w->ents[w->n].size = n;
    w->ents[w->n].local = local;
    w->n++;
    return PTDP_OK;
}

int ptdp__zipw_close(ptdp__zipw *w, int commit) {
    if (!w) return PTDP_OK;
    int rc = w->failed ? PTDP_EIO : PTDP_OK;
    uint64_t cd = w->pos;
    for (int i = 0; commit && rc == PTDP_OK && i < w->n; i++) {
        uint8_t c[46];
        size_t nlen = strlen(w->ents[i].name);
        memset(c, 0, sizeof c);
        wr32(c, 0x02014b50);
        wr16(c + 4, 20);
        wr16(c + 6, 20);
        wr32(c + 16, w->ents[i].crc);
        wr32(c + 20, (uint32_t)w->ents[i].size);
        wr32(c + 24, (uint32_t)w->ents[i].size);
        wr16(c + 28, (uint32_t)nlen);
        wr32(c + 42, (uint32_t)w->ents[i].local);
        rc = put(w, c, 46);
        if (rc == PTDP_OK) rc = put(w, w->ents[i].name, nlen);
    }
    if (commit && rc == PTDP_OK) {
        uint8_t e[22];
        memset(e, 0, sizeof e);
        wr32(e, 0x06054b50);
        wr16(e + 8, (uint32_t)w->n);
        wr16(e + 10, (uint32_t)w->n);
        wr32(e + 12, (uint32_t)(w->pos - cd));
        wr32(e + 16, (uint32_t)cd);
        rc = put(w, e, 22);
    }
    if (fflush(w->f) != 0 || (commit && fsync(fileno(w->f)) != 0))
        if (rc == PTDP_OK)
            rc = ptdp_errorf(PTDP_EIO, "cannot write %s: %s", w->tmp, strerror(errno));
    if (fclose(w->f) != 0 && rc == PTDP_OK)
        rc = ptdp_errorf(PTDP_EIO, "cannot write %s: %s", w->tmp, strerror(errno));
    if (commit && rc == PTDP_OK && rename(w->tmp, w->path) != 0)
        rc = ptdp_errorf(PTDP_EIO, "cannot rename %s to %s: %s", w->tmp, w->path, strerror(errno));
    if (!commit || rc) remove(w->tmp);
    free(w->ents);
    free(w);
    return rc;
}
