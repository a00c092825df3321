/* rope_table.c - the cos and sin tables of rotary position embeddings
 * (kernels.h: ptdp_rope_table_init), the same for every backend: computed
 * on the host in double, as Hugging Face's and Megatron's rotary modules
 * compute their frequencies, rounded to fp32 and uploaded. Not here: the
 * rotation itself (each backend's rope_fwd and rope_bwd). */
#include <math.h>

#include "kernels/kernels.h"

int64_t ptdp_rope_table_floats(int64_t S, int64_t rd) { return S * rd; }

/* Row p: cos(p f_i), i < rd/2, then sin(p f_i); f_i = 1 / theta^(2i/rd) (the
 * reference's 1.0 / (theta ** (arange(0, rd, 2) / rd)), in double). Rows go
 * up in blocks through a buffer on the stack: nothing is allocated. */
void ptdp_rope_table_init(ptdp_backend *be, float *table, int64_t S, int64_t rd, double theta) {
    enum { MAX_RD = 1024, BUF = 8192 };
    PTDP_ASSERT_MSG(rd >= 2 && rd % 2 == 0 && rd <= MAX_RD && S >= 0 && theta > 0.0,
                    "rotary table: rd even in [2, 1024], theta > 0");
    const int64_t half = rd / 2, rows = BUF / rd;
    double inv[MAX_RD / 2];
    float buf[BUF];
    for (int64_t i = 0; i < half; i++) inv[i] = 1.0 / pow(theta, (double)(2 * i) / (double)rd);
    for (int64_t p0 = 0; p0 < S; p0 += rows) {
        const int64_t n = S - p0 < rows ? S - p0 : rows;
        for (int64_t r = 0; r < n; r++)
            for (int64_t i = 0; i < half; i++) {
                const double f = (double)(p0 + r) * inv[i];
                buf[r * rd + i] = (float)cos(f);
                buf[r * rd + half + i] = (float)sin(f);
            }
        be->upload(be, table + p0 * rd, buf, sizeof(float) * (size_t)(n * rd));
    }
}
