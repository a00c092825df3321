/* tensorboard.c - --tensorboard-dir: TensorBoard event files written by
 * hand, scalars only (what Megatron's training_log and
 * evaluate_and_print_results write). Deliberately not here: images,
 * histograms, text, hyper-parameters, or reading event files (the tests carry
 * their own reader, tests/tools/tb_decode.c).
 *
 * Why no library: Debian has libprotobuf-c, but it needs generated code for
 * TensorFlow's event.proto/summary.proto (protoc-c at build time) and does not
 * do the record framing; the five fields written here take a page.
 *
 * The file: DIR/events.out.tfevents.<unix seconds, 10 digits>.<hostname>.<pid>.0
 * (the name TensorBoard globs for), a sequence of TFRecords:
 *
 *   uint64 length               little-endian, bytes of data
 *   uint32 masked_crc(length)   CRC-32C of those 8 bytes, masked
 *   byte   data[length]         one Event protocol buffer
 *   uint32 masked_crc(data)
 *
 * masked_crc(x) = ((c >> 15) | (c << 17)) + 0xa282ead8 with c = CRC-32C
 * (Castagnoli, reflected polynomial 0x82f63b78) of x, all mod 2^32.
 *
 * Event (protocol buffer wire format: each field is a varint key
 * (number << 3 | wire type), then the value; type 1: 8 bytes little-endian,
 * 0: varint, 2: varint length + bytes, 5: 4 bytes little-endian):
 *   1 wall_time    double   key 0x09   seconds since the epoch
 *   2 step         int64    key 0x10   the iteration (or consumed samples
 *                                      for the "... vs samples" tags)
 *   3 file_version string   key 0x1a   "brain.Event:2", first record only
 *   5 summary      Summary  key 0x2a
 * Summary: 1 value (repeated) Summary.Value, key 0x0a; one per event here.
 * Summary.Value: 1 tag string key 0x0a; 2 simple_value float key 0x15. */
#define _POSIX_C_SOURCE 200809L /* gethostname, clock_gettime */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "train/train_internal.h"

struct ptdp_tb {
    FILE *f;
    char path[4096];
};

/* CRC-32C, bit by bit (records are tens of bytes: no table needed, so no
 * state to build) */
static uint32_t crc32c(const uint8_t *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    }
    return ~c;
}

static uint32_t masked_crc(const uint8_t *p, size_t n) {
    uint32_t c = crc32c(p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static size_t put_le(uint8_t *b, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) b[i] = (uint8_t)(v >> (8 * i));
    return (size_t)bytes;
}

static size_t put_varint(uint8_t *b, uint64_t v) {
    size_t n = 0;
    do {
        b[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    return n;
}

/* One record around an Event: either the file version or one scalar. */
static int write_event(ptdp_tb *tb, int64_t step, const char *version, const char *tag,
                       float value) {
    uint8_t ev[1024], val[600];
    size_t n = 0, nv = 0;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double wall = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    uint64_t bits;
    memcpy(&bits, &wall, 8);
    ev[n++] = 0x09;
    n += put_le(ev + n, bits, 8);
    ev[n++] = 0x10;
    n += put_varint(ev + n, (uint64_t)step); /* int64: negative steps take 10 bytes */
    if (version) {
        size_t len = strlen(version);
        ev[n++] = 0x1a;
        n += put_varint(ev + n, len);
        memcpy(ev + n, version, len);
        n += len;
    } else {
        size_t len = strlen(tag);
        if (len > 512) len = 512; /* tags are ptdp's own, all short */
        val[nv++] = 0x0a;
        nv += put_varint(val + nv, len);
        memcpy(val + nv, tag, len);
        nv += len;
        uint32_t fb;
        memcpy(&fb, &value, 4);
        val[nv++] = 0x15;
        nv += put_le(val + nv, fb, 4);
        /* Summary { value: Value } inside Event field 5 */
        uint8_t sum[620];
        size_t ns = 0;
        sum[ns++] = 0x0a;
        ns += put_varint(sum + ns, nv);
        memcpy(sum + ns, val, nv);
        ns += nv;
        ev[n++] = 0x2a;
        n += put_varint(ev + n, ns);
        memcpy(ev + n, sum, ns);
        n += ns;
    }
    uint8_t head[12], tail[4];
    put_le(head, n, 8);
    put_le(head + 8, masked_crc(head, 8), 4);
    put_le(tail, masked_crc(ev, n), 4);
    if (fwrite(head, 1, 12, tb->f) != 12 || fwrite(ev, 1, n, tb->f) != n ||
        fwrite(tail, 1, 4, tb->f) != 4 || fflush(tb->f) != 0)
        return ptdp_errorf(PTDP_EIO, "--tensorboard-dir: cannot write %s", tb->path);
    return PTDP_OK;
}

static int mkdir_p(const char *dir) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || !*p) {
            char c = *p;
            *p = 0;
            if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
            *p = c;
            if (!c) break;
        }
    }
    return 0;
}

int ptdp__tb_open(ptdp_tb **out, const char *dir) {
    *out = NULL;
    if (mkdir_p(dir) != 0)
        return ptdp_errorf(PTDP_EIO, "--tensorboard-dir %s: cannot create the directory (%s)", dir,
                           strerror(errno));
    ptdp_tb *tb = calloc(1, sizeof *tb);
    if (!tb) return ptdp_errorf(PTDP_ENOMEM, "out of memory");
    char host[256] = "localhost";
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = 0;
    snprintf(tb->path, sizeof tb->path, "%s/events.out.tfevents.%010lld.%s.%ld.0", dir,
             (long long)time(NULL), host, (long)getpid());
    if (!(tb->f = fopen(tb->path, "wb"))) {
        int e = errno;
        free(tb);
        return ptdp_errorf(PTDP_EIO, "--tensorboard-dir %s: cannot create an event file there (%s)",
                           dir, strerror(e));
    }
    int rc = write_event(tb, 0, "brain.Event:2", NULL, 0);
    if (rc) {
        ptdp__tb_close(tb);
        return rc;
    }
    *out = tb;
    return PTDP_OK;
}

int ptdp__tb_scalar(ptdp_tb *tb, const char *tag, int64_t step, double value) {
    return write_event(tb, step, NULL, tag, (float)value);
}

const char *ptdp__tb_path(const ptdp_tb *tb) { return tb->path; }

void ptdp__tb_close(ptdp_tb *tb) {
    if (!tb) return;
    if (tb->f) fclose(tb->f);
    free(tb);
}
