/* engine/text/tokenizer_testing.h — the tokenizer's character classes, which the tests check
 * code point by code point against the reference packages (tests/golden). The tokenizer uses
 * them through tokenizer_internal.h; nothing outside engine/text/ and the tests calls them. */
#ifndef NUMLA_ENGINE_TEXT_TOKENIZER_TESTING_H
#define NUMLA_ENGINE_TEXT_TOKENIZER_TESTING_H

#include <stdint.h>

#include <utf8proc.h>

/* tokenizer_unicode.c: the general category of cp in Unicode 16.0 where utf8proc's tables are
 * older (unicode_newer.h laid over them), else utf8proc's. Not collective; thread-safe. */
utf8proc_category_t numla_tokenizer_unicode_category(uint32_t cp);
/* tokenizer_tiktoken.c: the Kimi pattern's \p{Han} (unicode_han.h) and \s (White_Space).
 * Not collective; thread-safe. */
int numla_tokenizer_kimi_is_han(uint32_t cp);
int numla_tokenizer_kimi_is_ws(uint32_t cp);

#endif
