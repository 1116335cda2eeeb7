/* engine/json/model_json.c — a model directory's JSON files, with integers beyond int64 read as
 * reals (model_json.h). */
#include "engine/json/model_json.h"

#include "common/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum {
    /* integers beyond int64 turned into reals in one text: each costs a parse of the whole
     * text, and published files carry one or two */
    JSON_MAX_REPAIRS = 64,
};

/* The integer token that ends at byte `end` of text (jansson's error position for a numeric
 * overflow: the byte after the token): its first byte in *start; 0 when text[..end) does not
 * end in a whole integer token (a real's overflow, or a position that is not a token's end). */
static int json_int_token_at(const char *text, size_t len, size_t end, size_t *start)
{
    if (end == 0 || end > len)
        return 0;
    size_t s = end;
    while (s > 0 && text[s - 1] >= '0' && text[s - 1] <= '9')
        s--;
    if (s == end)
        return 0;
    if (s > 0 && text[s - 1] == '-')
        s--;
    if (s > 0 && strchr("0123456789.eE+-", text[s - 1]))
        return 0;
    if (end < len && strchr(".eE", text[end]))
        return 0;
    *start = s;
    return 1;
}

numla_status numla_json_text_parse(const char *text, size_t len, size_t flags, const char *source,
                                   json_t **out)
{
    if (!out)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_json_text_parse: NULL argument");
    *out = NULL;
    const char *src = source ? source : "JSON text";
    if (!text)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "%s: no text", src);
    json_error_t err;
    json_t *root = json_loadb(text, len, flags, &err);
    if (root) {
        *out = root;
        return NUMLA_STATUS_OK;
    }
    /* the private copy, with ".0" after each integer jansson cannot hold; ins[k] is where the
     * k-th insertion went (ascending: each parse stops at the first overflow left) */
    char *copy = NULL;
    size_t clen = len, ins[JSON_MAX_REPAIRS];
    int n = 0;
    while (json_error_code(&err) == json_error_numeric_overflow && n < JSON_MAX_REPAIRS) {
        const char *cur = copy ? copy : text;
        size_t start, end = err.position < 0 ? 0 : (size_t)err.position;
        if (!json_int_token_at(cur, clen, end, &start))
            break;
        char *c = malloc(clen + 3);
        if (!c) {
            free(copy);
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "%s: no memory to read", src);
        }
        memcpy(c, cur, end);
        memcpy(c + end, ".0", 2);
        memcpy(c + end + 2, cur + end, clen - end);
        c[clen + 2] = 0;
        NUMLA_DEBUG("%s:%d: integer %.*s is beyond 64 bits: read as a real", src, err.line,
                    (int)(end - start > 64 ? 64 : end - start), cur + start);
        free(copy);
        copy = c;
        clen += 2;
        ins[n++] = end;
        root = json_loadb(copy, clen, flags, &err);
        if (root) {
            free(copy);
            *out = root;
            return NUMLA_STATUS_OK;
        }
    }
    /* the column in the caller's text: less the insertions on the error's line before it */
    int column = err.column;
    if (copy && err.position >= 0) {
        size_t pos = (size_t)err.position;
        for (int k = n - 1; k >= 0; k--) {
            if (ins[k] >= pos)
                continue;
            if (memchr(copy + ins[k], '\n', pos - ins[k]))
                break;
            column -= 2;
        }
    }
    free(copy);
    if (json_error_code(&err) == json_error_numeric_overflow)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s:%d:%d: invalid JSON: %s (%s)", src, err.line, column,
                   err.text, n >= JSON_MAX_REPAIRS ? "too many integers beyond 64 bits"
                                                   : "a number out of range");
    NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s:%d:%d: invalid JSON: %s", src, err.line, column, err.text);
}

numla_status numla_json_file_read(const char *path, size_t flags, json_t **out)
{
    if (!path || !out)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_json_file_read: NULL argument");
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        NUMLA_FAIL(NUMLA_STATUS_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        NUMLA_FAIL(NUMLA_STATUS_IO, "%s: not a regular file", path);
    }
    size_t size = (size_t)st.st_size;
    char *buf = malloc(size + 1);
    if (!buf) {
        fclose(f);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "%s: no memory to read %zu bytes", path, size);
    }
    size_t got = size ? fread(buf, 1, size, f) : 0;
    int rerr = ferror(f);
    fclose(f);
    if (rerr || got != size) {
        free(buf);
        NUMLA_FAIL(NUMLA_STATUS_IO, "%s: read error", path);
    }
    buf[size] = 0;
    numla_status s = numla_json_text_parse(buf, size, flags, path, out);
    free(buf);
    NUMLA_CHECK(s);
    return NUMLA_STATUS_OK;
}
