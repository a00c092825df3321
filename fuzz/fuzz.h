/* fuzz.h - what the harnesses in fuzz/ share: the libFuzzer entry points
 * (each fuzz_NAME.c defines LLVMFuzzerTestOneInput; libFuzzer or
 * replay_main.c calls it) and a tiny GPT-2 style tokenizer for the harnesses
 * whose parser needs one (fuzz_common.c). */
#ifndef PTDP_FUZZ_H
#define PTDP_FUZZ_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "data/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A byte-level BPE tokenizer of 256 byte tokens, a few merges ("h e",
 * "he l", "t h", ...) and <|endoftext|>, built once and kept for the
 * process. Aborts if it cannot be built (a broken harness, not an input). */
const ptdp_tokenizer *ptdp_fuzz_tiny_tokenizer(void);

/* Aborts with a message when cond is false: an invariant the parser promised
 * on an input it accepted. libFuzzer records the input as a crash. */
#define PTDP_FUZZ_CHECK(cond) ((cond) ? (void)0 : ptdp_fuzz_fail(#cond, __FILE__, __LINE__))
_Noreturn void ptdp_fuzz_fail(const char *expr, const char *file, int line);

#endif
