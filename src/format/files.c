/* files.c - the file primitives checkpoints and exports are made of: CRC-32
 * (IEEE 802.3, zlib's), a file's CRC and size, mkdir -p, fsync of a
 * directory and atomic writes (temporary, fsync, rename). Not here: what is
 * written (src/ckpt). */
#include "format/format.h"

#include "base/base.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

uint32_t ptdp_crc32(uint32_t crc, const void *data, size_t n) {
    uint32_t table[256];
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        table[i] = c;
    }
    const unsigned char *p = data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

int ptdp_file_crc32(const char *path, uint32_t *crc, int64_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return ptdp_errorf(errno == ENOENT ? PTDP_ENOTFOUND : PTDP_EIO, "%s: cannot open: %s", path,
                           strerror(errno));
    enum { CH = 1 << 20 };
    unsigned char *buf = malloc(CH);
    if (!buf) {
        fclose(f);
        return ptdp_errorf(PTDP_ENOMEM, "out of memory reading %s", path);
    }
    uint32_t c = 0;
    int64_t n = 0;
    size_t got;
    while ((got = fread(buf, 1, CH, f)) > 0) {
        c = ptdp_crc32(c, buf, got);
        n += (int64_t)got;
    }
    int bad = ferror(f);
    free(buf);
    fclose(f);
    if (bad) return ptdp_errorf(PTDP_EIO, "%s: read error", path);
    *crc = c;
    *size = n;
    return PTDP_OK;
}

int ptdp_file_mkdirs(const char *dir) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *s = buf + 1;; s++) {
        if (*s == '/' || *s == 0) {
            char keep = *s;
            *s = 0;
            if (mkdir(buf, 0777) != 0 && errno != EEXIST)
                return ptdp_errorf(PTDP_EIO, "cannot create directory %s: %s", buf,
                                   strerror(errno));
            *s = keep;
            if (!keep) break;
        }
    }
    return PTDP_OK;
}

void ptdp_file_fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

int ptdp_file_write_atomic(const char *path, const char *text) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return ptdp_errorf(PTDP_EIO, "%s: cannot create: %s", tmp, strerror(errno));
    size_t n = strlen(text);
    int ok = fwrite(text, 1, n, f) == n && fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = (fclose(f) == 0) && ok;
    if (ok && rename(tmp, path) != 0) ok = 0;
    if (!ok) {
        int e = errno;
        remove(tmp);
        return ptdp_errorf(PTDP_EIO, "%s: cannot write: %s", path, strerror(e));
    }
    return PTDP_OK;
}
