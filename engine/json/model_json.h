/* engine/json/model_json.h — the one reader of a model directory's JSON files (config.json,
 * tokenizer_config.json, generation_config.json, tokenizer.json, the safetensors index, ...).
 *
 * jansson keeps every integer in a json_int_t (int64) and refuses the whole file when one does
 * not fit ("too big integer", json_error_numeric_overflow). Published files carry such numbers
 * where numla never looks: transformers writes tokenizer_config.json's "model_max_length" as
 * 1000000000000000019884624838656 (int(1e30)) whenever no length was set. These readers parse
 * such an integer as a real instead (that one token, in a private copy of the text; every other
 * integer stays an exact integer), so a field numla does not use never refuses a model, and a
 * field it does use meets its reader's type and range check, which names the file and the field.
 * A real out of double's range ("1e400") is still an error naming file, line and column.
 * Neither function is collective; both are thread-safe. Requests (HTTP bodies, JSONL lines) are
 * not model files and keep jansson's own parsing. */
#ifndef NUMLA_ENGINE_JSON_MODEL_JSON_H
#define NUMLA_ENGINE_JSON_MODEL_JSON_H

#include <jansson.h>
#include <stddef.h>

#include "common/status.h"

/* Parse len bytes of text (need not be NUL-terminated) with jansson's decoding `flags`
 * (JSON_REJECT_DUPLICATES, JSON_ALLOW_NUL, JSON_DECODE_ANY, ...) into *out (a new reference;
 * NULL on failure). `source` names the text in errors: "SOURCE:LINE:COLUMN: invalid JSON: ..."
 * (NUMLA_STATUS_FORMAT). Local. */
numla_status numla_json_text_parse(const char *text, size_t len, size_t flags, const char *source,
                                   json_t **out);

/* Read the file at path and parse it as numla_json_text_parse does, naming the path in errors.
 * A file that cannot be opened or read: NUMLA_STATUS_IO. Local. */
numla_status numla_json_file_read(const char *path, size_t flags, json_t **out);

#endif
