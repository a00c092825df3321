/* test_layout.c - stage layouts (pipeline/layout.c): the layers of every
 * virtual stage for each of Megatron's ways of splitting, against lists
 * worked out by hand from Megatron's get_num_layers_to_build and
 * get_transformer_layer_offset; the layout string's unrolling; and the
 * rejected combinations, each with its message. */
#include <string.h>

#include "pipeline/schedule.h"
#include "test.h"

/* Layers per virtual stage, "n0 n1 | n2 n3" (ranks by spaces, chunks by |),
 * and the ranges must tile [0, l) in stage order. */
static int counts_are(const ptdp_stage_layout *L, int64_t l, int p, int v, const char *want) {
    char buf[512];
    ptdp_stage_layout_str(L, l, p, v, buf, sizeof buf);
    int64_t next = 0;
    for (int k = 0; k < p * v; k++) {
        int64_t b, e;
        ptdp_stage_layout_range(L, l, p, v, k, &b, &e);
        if (b != next || e < b) return 0;
        next = e;
    }
    if (next != l || strcmp(buf, want)) {
        fprintf(stderr, "  layout gives '%s' (covers %lld of %lld), want '%s'\n", buf,
                (long long)next, (long long)l, want);
        return 0;
    }
    return 1;
}

static void test_rules(void) {
    ptdp_stage_layout L;
    memset(&L, 0, sizeof L);
    CHECK(ptdp_stage_layout_is_even(&L) && ptdp_stage_layout_is_even(NULL));
    CHECK(ptdp_stage_layout_check(&L, 8, 2, 2) == PTDP_OK);
    CHECK(counts_are(&L, 8, 2, 2, "2 2 | 2 2"));
    CHECK(ptdp_stage_layout_check(&L, 8, 3, 1) == PTDP_ECONFIG);

    /* first/last: rank 0 and p-1 fixed, the middle ranks share the rest */
    L.last = 3;
    CHECK(ptdp_stage_layout_check(&L, 8, 2, 1) == PTDP_OK);
    CHECK(counts_are(&L, 8, 2, 1, "5 3"));
    L.first = 2, L.last = 2;
    CHECK(ptdp_stage_layout_check(&L, 8, 3, 1) == PTDP_OK);
    CHECK(counts_are(&L, 8, 3, 1, "2 4 2"));
    /* with v = 2 (Megatron's example of offsets: chunk c starts at
     * c * (first + middle + last) / v) */
    L.first = 2, L.last = 6;
    CHECK(ptdp_stage_layout_check(&L, 8, 2, 2) == PTDP_OK);
    CHECK(counts_are(&L, 8, 2, 2, "1 3 | 1 3"));
    L.first = 4, L.last = 4;
    CHECK(ptdp_stage_layout_check(&L, 16, 4, 2) == PTDP_OK);
    CHECK(counts_are(&L, 16, 4, 2, "2 2 2 2 | 2 2 2 2"));
    L.first = 2, L.last = 2;
    CHECK(ptdp_stage_layout_check(&L, 12, 4, 2) == PTDP_OK);
    CHECK(counts_are(&L, 12, 4, 2, "1 2 2 1 | 1 2 2 1"));
    CHECK(ptdp_stage_layout_check(&L, 12, 4, 2) == PTDP_OK);
    L.first = 3, L.last = 0;
    CHECK(ptdp_stage_layout_check(&L, 8, 2, 2) == PTDP_ECONFIG); /* 3 % v */
    L.first = 2, L.last = 2;
    CHECK(ptdp_stage_layout_check(&L, 8, 2, 1) == PTDP_ECONFIG); /* 4 left, no middle rank */
    CHECK(ptdp_stage_layout_check(&L, 9, 4, 1) == PTDP_ECONFIG); /* 5 over 2 middle ranks */
    CHECK(ptdp_stage_layout_check(&L, 8, 1, 1) == PTDP_ECONFIG); /* p = 1 */
    /* the messages name the ranks the flags leave to the split, never "middle"
     * ranks that p = 2 does not have */
    L.first = 4, L.last = 0;
    CHECK(ptdp_stage_layout_check(&L, 4, 2, 1) == PTDP_ECONFIG);
    CHECK(strstr(ptdp_last_error(), "--decoder-first-pipeline-num-layers 4 takes all "
                                    "--num-layers 4 and leaves none for pipeline rank 1") &&
          !strstr(ptdp_last_error(), "middle"));
    CHECK(ptdp_stage_layout_check(&L, 7, 2, 2) == PTDP_ECONFIG);
    CHECK(strstr(ptdp_last_error(), "leave for pipeline rank 1 must split evenly into its v = 2") &&
          !strstr(ptdp_last_error(), "middle"));
    L.first = 2, L.last = 2;
    CHECK(ptdp_stage_layout_check(&L, 8, 2, 1) == PTDP_ECONFIG);
    CHECK(strstr(ptdp_last_error(), "leave 4 of --num-layers 8 to no pipeline rank") &&
          !strstr(ptdp_last_error(), "middle"));
    CHECK(ptdp_stage_layout_check(&L, 9, 4, 1) == PTDP_ECONFIG);
    CHECK(strstr(ptdp_last_error(), "leave for the 2 pipeline ranks 1-2 must split evenly"));

    /* embedding / loss counted as a layer */
    memset(&L, 0, sizeof L);
    L.embedding = 1;
    CHECK(ptdp_stage_layout_check(&L, 8, 3, 1) == PTDP_OK);
    CHECK(counts_are(&L, 8, 3, 1, "2 3 3"));
    L.loss = 1;
    CHECK(ptdp_stage_layout_check(&L, 6, 2, 1) == PTDP_OK);
    CHECK(counts_are(&L, 6, 2, 1, "3 3"));
    CHECK(ptdp_stage_layout_check(&L, 8, 2, 2) == PTDP_ECONFIG); /* 10 / 2 = 5 per rank, odd */
    CHECK(ptdp_stage_layout_check(&L, 10, 2, 2) == PTDP_OK);
    CHECK(counts_are(&L, 10, 2, 2, "2 3 | 3 2"));
    CHECK(ptdp_stage_layout_check(&L, 10, 3, 2) == PTDP_OK); /* 12 / 6 = 2 per chunk */
    CHECK(counts_are(&L, 10, 3, 2, "1 2 2 | 2 2 1"));
    CHECK(ptdp_stage_layout_check(&L, 2, 4, 1) == PTDP_OK); /* E alone, t, t, L alone */
    CHECK(counts_are(&L, 2, 4, 1, "0 1 1 0"));
    CHECK(ptdp_stage_layout_check(&L, 7, 2, 1) == PTDP_ECONFIG);
    L.first = 2;
    CHECK(ptdp_stage_layout_check(&L, 6, 2, 1) == PTDP_ECONFIG); /* two kinds at once */
}

static void test_strings(void) {
    ptdp_stage_layout L;
    CHECK(ptdp_stage_layout_parse("E|t*3|t*3|t*2,L", &L) == PTDP_OK);
    CHECK(L.nstages == 4 && ptdp_stage_layout_check(&L, 8, 4, 1) == PTDP_OK);
    CHECK(counts_are(&L, 8, 4, 1, "0 3 3 2"));
    CHECK(ptdp_stage_layout_check(&L, 8, 2, 2) == PTDP_OK); /* 4 stages, v = 2 */
    CHECK(counts_are(&L, 8, 2, 2, "0 3 | 3 2"));
    CHECK(ptdp_stage_layout_check(&L, 9, 4, 1) == PTDP_ECONFIG); /* 8 t, l = 9 */
    CHECK(ptdp_stage_layout_check(&L, 8, 2, 1) == PTDP_ECONFIG); /* 4 stages, p*v = 2 */
    /* groups: "(tt|)*2" is "tt|tt|"; commas are cosmetic */
    CHECK(ptdp_stage_layout_parse("Et,t|(tt|)*2,tL", &L) == PTDP_OK);
    CHECK(L.nstages == 4 && counts_are(&L, 7, 4, 1, "2 2 2 1"));
    CHECK(ptdp_stage_layout_parse("Ett|t*0t|ttL", &L) == PTDP_OK);
    CHECK(counts_are(&L, 5, 3, 1, "2 1 2"));
    /* what the string alone rejects */
    CHECK(ptdp_stage_layout_parse("tE|tL", &L) == PTDP_EINVAL);
    CHECK(strstr(ptdp_last_error(), "embedding E must be the first"));
    CHECK(ptdp_stage_layout_parse("Et|Lt", &L) == PTDP_EINVAL);
    CHECK(strstr(ptdp_last_error(), "loss L must be the last"));
    CHECK(ptdp_stage_layout_parse("Et|t", &L) == PTDP_EINVAL);
    CHECK(strstr(ptdp_last_error(), "exactly once"));
    CHECK(ptdp_stage_layout_parse("Et|x|tL", &L) == PTDP_EINVAL);
    CHECK(strstr(ptdp_last_error(), "unknown character 'x'"));
    CHECK(ptdp_stage_layout_parse("Et|m|tL", &L) == PTDP_EUNSUPPORTED);
    CHECK(ptdp_stage_layout_parse("E(t|t|tL", &L) == PTDP_EINVAL);
    CHECK(ptdp_stage_layout_parse("E((t)*2)*2|L", &L) == PTDP_EINVAL);
    CHECK(ptdp_stage_layout_parse("E|(t|)*200L", &L) == PTDP_EINVAL); /* > 128 stages */
    CHECK(L.nstages == 0);
    /* an empty middle stage: Megatron builds it, ptdp refuses it */
    CHECK(ptdp_stage_layout_parse("Et||tL", &L) == PTDP_OK);
    CHECK(ptdp_stage_layout_check(&L, 2, 3, 1) == PTDP_ECONFIG);
    CHECK(strstr(ptdp_last_error(), "stage 1 is empty"));
    /* a stage with only E or only L is fine */
    CHECK(ptdp_stage_layout_parse("E|tt|L", &L) == PTDP_OK);
    CHECK(ptdp_stage_layout_check(&L, 2, 3, 1) == PTDP_OK);
}

int main(void) {
    test_rules();
    test_strings();
    return test_done("test_layout");
}
