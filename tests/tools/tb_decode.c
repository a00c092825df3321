/* tb_decode.c - reads a TensorBoard event file on its own, for the tests of
 * --tensorboard-dir: written from the format's description (TFRecord framing
 * around TensorFlow Event protocol buffers), sharing no code with ptdp's
 * writer (src/train/tensorboard.c). Every record's two masked CRC-32Cs are
 * checked (a bitwise CRC here, a table there), every protocol-buffer field is
 * walked by its wire type, unknown fields are skipped.
 *
 * usage: tb_decode FILE
 * prints "version <file_version>" for a record carrying one, and for every
 * scalar "<step>\t<tag>\t<simple_value %.9g>"; exits 1 with one message on
 * the first malformed byte (naming the record and offset). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *file;

static void fail(long rec, long off, const char *what) {
    fprintf(stderr, "tb_decode: %s: record %ld (byte %ld): %s\n", file, rec, off, what);
    exit(1);
}

static uint32_t crc32c_bitwise(const uint8_t *p, size_t n) {
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int b = 0; b < 8; b++) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
    }
    return crc ^ 0xFFFFFFFFu;
}

static uint32_t unmasked_ok(const uint8_t *p, size_t n, uint32_t stored) {
    uint32_t c = crc32c_bitwise(p, n);
    uint32_t masked = ((c >> 15) | (c << 17)) + 0xA282EAD8u;
    return masked == stored;
}

static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

typedef struct {
    const uint8_t *p, *end;
} buf;

static int varint(buf *b, uint64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (b->p >= b->end) return 0;
        uint8_t c = *b->p++;
        v |= (uint64_t)(c & 0x7F) << shift;
        if (!(c & 0x80)) {
            *out = v;
            return 1;
        }
    }
    return 0;
}

/* Next field: number, wire type, and its payload (length-delimited: sub,
 * fixed: value). 0 at the end, -1 when malformed. */
static int field(buf *b, uint32_t *num, int *wt, uint64_t *value, buf *sub) {
    if (b->p == b->end) return 0;
    uint64_t key;
    if (!varint(b, &key)) return -1;
    *num = (uint32_t)(key >> 3);
    *wt = (int)(key & 7);
    switch (*wt) {
    case 0:
        return varint(b, value) ? 1 : -1;
    case 1:
    case 5: {
        int n = *wt == 1 ? 8 : 4;
        if (b->end - b->p < n) return -1;
        *value = le(b->p, n);
        b->p += n;
        return 1;
    }
    case 2: {
        uint64_t len;
        if (!varint(b, &len) || (uint64_t)(b->end - b->p) < len) return -1;
        sub->p = b->p;
        sub->end = b->p + len;
        b->p += len;
        return 1;
    }
    default:
        return -1;
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: tb_decode FILE\n");
        return 2;
    }
    file = argv[1];
    /* the CRC-32C check value (RFC 3720's polynomial): a wrong polynomial
     * here would make the test agree with a wrong writer */
    if (crc32c_bitwise((const uint8_t *)"123456789", 9) != 0xE3069283u) {
        fprintf(stderr, "tb_decode: CRC-32C self-check failed\n");
        return 1;
    }
    FILE *f = fopen(file, "rb");
    if (!f) {
        fprintf(stderr, "tb_decode: cannot open %s\n", file);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *data = malloc(size > 0 ? (size_t)size : 1);
    if (!data || fread(data, 1, (size_t)size, f) != (size_t)size) {
        fprintf(stderr, "tb_decode: cannot read %s\n", file);
        return 1;
    }
    fclose(f);
    long off = 0, rec = 0, scalars = 0;
    while (off < size) {
        if (size - off < 12) fail(rec, off, "truncated length header");
        uint64_t len = le(data + off, 8);
        if (!unmasked_ok(data + off, 8, (uint32_t)le(data + off + 8, 4)))
            fail(rec, off, "the length's CRC does not match");
        if ((uint64_t)(size - off - 12) < len + 4) fail(rec, off, "truncated record");
        const uint8_t *ev = data + off + 12;
        if (!unmasked_ok(ev, (size_t)len, (uint32_t)le(ev + len, 4)))
            fail(rec, off, "the data's CRC does not match");
        buf b = {ev, ev + len}, sub;
        uint32_t num;
        int wt, r;
        uint64_t v;
        double wall = 0;
        int64_t step = 0;
        while ((r = field(&b, &num, &wt, &v, &sub)) == 1) {
            if (num == 1 && wt == 1) {
                memcpy(&wall, &v, 8);
            } else if (num == 2 && wt == 0) {
                step = (int64_t)v;
            } else if (num == 3 && wt == 2) {
                printf("version %.*s\n", (int)(sub.end - sub.p), (const char *)sub.p);
            } else if (num == 5 && wt == 2) { /* Summary */
                buf sb = sub, vb;
                uint32_t sn;
                int swt, sr;
                uint64_t sv;
                while ((sr = field(&sb, &sn, &swt, &sv, &vb)) == 1) {
                    if (sn != 1 || swt != 2) continue;
                    /* Summary.Value: tag (1), simple_value (2, float) */
                    buf xb = vb, tb;
                    uint32_t xn;
                    int xwt, xr, has_value = 0;
                    uint64_t xv;
                    char tag[512] = "";
                    float value = 0;
                    while ((xr = field(&xb, &xn, &xwt, &xv, &tb)) == 1) {
                        if (xn == 1 && xwt == 2) {
                            int n = (int)(tb.end - tb.p);
                            if (n >= (int)sizeof tag) n = (int)sizeof tag - 1;
                            memcpy(tag, tb.p, (size_t)n);
                            tag[n] = 0;
                        } else if (xn == 2 && xwt == 5) {
                            uint32_t bits = (uint32_t)xv;
                            memcpy(&value, &bits, 4);
                            has_value = 1;
                        }
                    }
                    if (xr < 0) fail(rec, off, "malformed Summary.Value");
                    if (!has_value || !tag[0])
                        fail(rec, off, "a Summary.Value without tag or value");
                    printf("%lld\t%s\t%.9g\n", (long long)step, tag, (double)value);
                    scalars++;
                }
                if (sr < 0) fail(rec, off, "malformed Summary");
            }
        }
        if (r < 0) fail(rec, off, "malformed Event");
        if (!(wall > 1e9)) fail(rec, off, "no plausible wall_time");
        off += 12 + (long)len + 4;
        rec++;
    }
    free(data);
    fprintf(stderr, "tb_decode: %s: %ld records, %ld scalars, every CRC correct\n", file, rec,
            scalars);
    return 0;
}
