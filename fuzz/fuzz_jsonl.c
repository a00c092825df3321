/* fuzz_jsonl.c - the input of `ptdp preprocess` (data/preprocess.c): the
 * split into JSON lines and each line's object, the strings under two keys
 * tokenized (with the EOD id appended), as preprocess does; and the same
 * bytes read as plain-text documents. Input: a .jsonl file. */
#include <string.h>

#include "data/data_internal.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const ptdp_tokenizer *tok = ptdp_fuzz_tiny_tokenizer();
    static const char *const keys[2] = {"text", "title"};
    ptdp_tokens out[2] = {{0}, {0}};
    const char *d = (const char *)data;
    for (int json = 1; json >= 0; json--) {
        size_t pos = 0, lineno = 0;
        ptdp__item it;
        while (ptdp__pp_next_item(d, size, json, &pos, &lineno, &it)) {
            PTDP_FUZZ_CHECK(it.begin <= it.end && it.end <= size && pos <= size);
            if (json) {
                if (ptdp__pp_json_line(tok, NULL, d + it.begin, it.end - it.begin, keys, 2,
                                       ptdp_tokenizer_eod(tok), out, "fuzz.jsonl",
                                       it.lineno) == PTDP_OK)
                    for (int k = 0; k < 2; k++)
                        PTDP_FUZZ_CHECK(out[k].n == 0 ||
                                        out[k].ids[out[k].n - 1] == ptdp_tokenizer_eod(tok));
            } else {
                out[0].n = 0;
                PTDP_FUZZ_CHECK(ptdp_tokenizer_encode(tok, NULL, d + it.begin, it.end - it.begin,
                                                      &out[0]) == PTDP_OK);
            }
        }
    }
    ptdp_tokens_free(&out[0]);
    ptdp_tokens_free(&out[1]);
    return 0;
}
