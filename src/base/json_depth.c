/* json_depth.c - the nesting bound every JSON reader of ptdp applies before
 * it hands text to cJSON: a scan of brackets outside strings, so a hostile
 * file of a million '[' is refused with a message instead of reaching the
 * parser's recursion. Not here: parsing itself (cJSON). */
#include "base.h"

int ptdp_json_check(const char *text, size_t len, int max_depth, const char *what) {
    int depth = 0, in_str = 0;
    for (size_t i = 0; i < len; i++) {
        const char c = text[i];
        if (in_str) {
            if (c == '\\')
                i++; /* the escaped character cannot end the string */
            else if (c == '"')
                in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == '[' || c == '{') {
            if (++depth > max_depth)
                return ptdp_errorf(PTDP_EFORMAT,
                                   "%s: JSON nested deeper than %d levels (corrupted or hostile "
                                   "file?)",
                                   what, max_depth);
        } else if (c == ']' || c == '}') {
            depth--;
        }
    }
    return PTDP_OK;
}
