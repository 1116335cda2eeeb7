/* tests/fuzz/fuzz_chat_template.c — fuzz target for the chat-template renderers
 * (engine/text/chat_template*.c), GLM-5's and DeepSeek-V3.2's JSON handling and Python string
 * methods above all.
 *
 * Input: byte 0 picks the built-in template, byte 1 the options (bit 0 add_generation_prompt,
 * 1 thinking, 2 thinking_given, 3 keep_reasoning); the rest is fields separated by 0x1F: the
 * tools JSON (empty: none), then per message four fields: role ("s", "u", "a", "t", "d", or a
 * name as is), content, reasoning_content, and one tool call's arguments (empty: no call); a
 * field that is exactly 0x01 is NULL. Every input must render, or fail with a message and no
 * output; a rendering must be NUL-terminated at its length, valid UTF-8 when every input was,
 * and start as the template starts. Linked into numla_unit (suite chat_template_fuzz); with
 * -DNUMLA_FUZZ=ON also a libFuzzer binary. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "engine/text/chat_template.h"
#include "engine/text/tokenizer.h"

/* 1: rendered, 0: refused with a message, -1: out of memory. */
int numla_fuzz_chat_template_run(const uint8_t *data, size_t size);

#define FUZZ_MAX_MSGS 64

static void fuzz_chat_die(const char *what, const char *name)
{
    fprintf(stderr, "fuzz_chat_template: %s (%s)\n", what, name);
    abort();
}

static const char *role_of(const char *f)
{
    static const char *const r[] = {"system", "user", "assistant", "tool", "developer"};
    static const char key[] = "suatd";
    const char *k = f[0] && !f[1] ? strchr(key, f[0]) : NULL;
    return k ? r[k - key] : f;
}

int numla_fuzz_chat_template_run(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    int nt = 0;
    while (numla_chat_template_names()[nt])
        nt++;
    const char *name = numla_chat_template_names()[data[0] % nt];
    numla_chat_options o = {.add_generation_prompt = data[1] & 1, .thinking = (data[1] >> 1) & 1,
                            .thinking_given = (data[1] >> 2) & 1,
                            .keep_reasoning = (data[1] >> 3) & 1};
    /* the fields, each NUL-terminated in a copy */
    char *buf = malloc(size - 1);
    if (!buf)
        return -1;
    memcpy(buf, data + 2, size - 2);
    buf[size - 2] = 0;
    char *field[1 + 4 * FUZZ_MAX_MSGS];
    int nf = 0;
    for (char *p = buf; nf < (int)(sizeof field / sizeof field[0]);) {
        field[nf++] = p;
        char *sep = memchr(p, 0x1f, (size_t)(buf + size - 2 - p));
        if (!sep)
            break;
        *sep = 0;
        p = sep + 1;
    }
    int utf8 = 1;
    for (int i = 0; i < nf; i++) {
        if (!strcmp(field[i], "\x01"))
            field[i] = NULL;
        else
            utf8 &= numla_utf8_invalid_offset(field[i], strlen(field[i])) < 0;
    }
    numla_chat_message m[FUZZ_MAX_MSGS];
    numla_chat_tool_call call[FUZZ_MAX_MSGS];
    int n = 0;
    for (int i = 1; i + 3 < nf && n < FUZZ_MAX_MSGS; i += 4, n++) {
        const char *args = field[i + 3];
        call[n] = (numla_chat_tool_call){.id = "call_0", .name = "f", .arguments = args};
        m[n] = (numla_chat_message){.role = field[i] ? role_of(field[i]) : "user",
                                    .content = field[i + 1],
                                    .reasoning_content = field[i + 2],
                                    .tool_call_id = "call_0"};
        if (args && *args) {
            m[n].has_tool_calls = 1;
            m[n].num_tool_calls = 1;
            m[n].tool_calls = &call[n];
        }
    }
    o.tools_json = nf > 0 && field[0] && field[0][0] ? field[0] : NULL;
    numla_chat_template *t = NULL;
    if (numla_chat_template_load_builtin(name, &t) != NUMLA_STATUS_OK) {
        free(buf);
        return -1;
    }
    char *out = (char *)1;
    size_t len = 0;
    numla_status s = numla_chat_template_render_opts(t, m, n, &o, &out, &len);
    int result = 1;
    if (s == NUMLA_STATUS_NO_MEMORY) {
        result = -1;
    } else if (s != NUMLA_STATUS_OK) {
        if (out || !numla_error_message()[0])
            fuzz_chat_die("refused without a message, or with output", name);
        result = 0;
    } else {
        if (!out || out[len] != 0 || strlen(out) != len)
            fuzz_chat_die("rendering not NUL-terminated at its length", name);
        if (utf8 && numla_utf8_invalid_offset(out, len) >= 0)
            fuzz_chat_die("valid UTF-8 in, invalid out", name);
        if (!strcmp(name, "glm-5") && strncmp(out, "[gMASK]<sop>", 12))
            fuzz_chat_die("glm-5 rendering does not start with [gMASK]<sop>", name);
        static const char bos[] = "<｜begin▁of▁sentence｜>";
        if ((!strcmp(name, "deepseek-v3.2") || !strcmp(name, "deepseek-v4")) &&
            strncmp(out, bos, sizeof bos - 1))
            fuzz_chat_die("a DeepSeek encoding's rendering does not start with its BOS", name);
    }
    free(result == 1 ? out : NULL);
    numla_chat_template_destroy(&t);
    free(buf);
    return result;
}

#ifdef NUMLA_FUZZ_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    numla_fuzz_chat_template_run(data, size);
    return 0;
}
#endif
