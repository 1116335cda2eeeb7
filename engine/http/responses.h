/* engine/http/responses.h — OpenAI's Responses API (POST /v1/responses) on top of the chat path.
 *
 * Request: {model?, input: string | [item, ...], instructions?, max_output_tokens?,
 * temperature?, top_p?, stream?, tools? ([{type: "function", name, description?, parameters?,
 * strict?}]), tool_choice? ("auto" | "none" | "required" | {type: "function", name}),
 * parallel_tool_calls?, text? ({format: {type: "text" | "json_object"} | {type: "json_schema",
 * name, schema, strict?, description?}}), user?, metadata? (echoed back), store? (taken, never
 * stored), reasoning? ({effort?: string | null (chat's reasoning_effort, the same values and
 * checks), summary? (ignored)}), and null / default values of truncation ("disabled"), include ([]),
 * background (false), previous_response_id, service_tier, prompt, max_tool_calls,
 * stream_options, top_logprobs}. Input items: messages {type?: "message", role: user | system |
 * developer | assistant, content: string | [{type: input_text | output_text | text, text}]},
 * {type: "function_call", call_id, name, arguments} (an assistant's tool call) and {type:
 * "function_call_output", call_id, output} (a tool message); "reasoning" items are dropped.
 * numla_responses_to_chat translates such a body into a chat completions body (instructions the
 * first system message, developer as system, max_output_tokens as max_tokens, text.format as
 * response_format, reasoning.effort as reasoning_effort, the tools and tool_choice in chat's
 * shape), which openai.c parses as chat;
 * what the API defines and numla does not serve (other tool types, image or file parts, a
 * previous_response_id, background, ...) is a 400 naming the field with OpenAI's error shape.
 *
 * Response: {id "resp_...", object "response", created_at, status "completed" | "incomplete"
 * (incomplete_details.reason "max_output_tokens" when max_output_tokens cut it), model,
 * output: [reasoning item (a thinking model's reasoning)?, message {id, type, status, role:
 * assistant, content: [{type: output_text, text, annotations: []}]}?, function_call {id,
 * call_id, name, arguments, status}...], usage {input_tokens, input_tokens_details
 * {cached_tokens}, output_tokens, output_tokens_details {reasoning_tokens: 0}, total_tokens},
 * and the request's settings echoed (instructions, max_output_tokens, temperature, top_p,
 * tools, tool_choice, parallel_tool_calls, text, metadata, user, store false, truncation
 * "disabled", reasoning {effort as given or null, summary null}, previous_response_id null,
 * error null)}. Streamed: Server-Sent Events
 * "event: TYPE\ndata: {type, sequence_number, ...}" — response.created, response.in_progress,
 * for a thinking model's reasoning the reasoning item's output_item.added, a
 * response.reasoning_text.delta per piece, reasoning_text.done and output_item.done (when the
 * answer begins, or at the end), response.output_item.added / content_part.added (the message,
 * at its first text),
 * response.output_text.delta per piece, then output_text.done, content_part.done,
 * output_item.done, each function call's output_item.added, function_call_arguments.done and
 * output_item.done, and response.completed (or response.incomplete) with the whole object; an
 * error after the stream started is an "error" event. No "[DONE]" (OpenAI sends none).
 * Not collective; no state beyond a stream's.
 */
#ifndef NUMLA_ENGINE_HTTP_RESPONSES_H
#define NUMLA_ENGINE_HTTP_RESPONSES_H

#include <jansson.h>
#include <stdint.h>

#include "common/status.h"
#include "common/strbuf.h"
#include "engine/http/openai.h"

/* A Responses body (a JSON object) as a chat completions body: *chat (new reference) and
 * *settings (new reference: the fields the response object echoes). Returns 1, or 0 with err
 * filled (400 naming the Responses field; 500 for no memory). */
int numla_responses_to_chat(json_t *body, json_t **chat, json_t **settings,
                            numla_openai_error *err);

/* A chat parser's error param in the Responses request's terms (messages... -> input,
 * max_tokens -> max_output_tokens, response_format -> text.format), in place. */
void numla_responses_error_param(numla_openai_error *err);

/* The response object of one finished choice (c NULL: in progress, no output yet); settings:
 * the compact JSON of numla_responses_to_chat's settings (NULL: none). */
numla_status numla_responses_format(const numla_openai_reply *r, const char *settings,
                                    const numla_openai_choice *c, const numla_openai_usage *u,
                                    char **out);

/* One stream's state: its sequence numbers and the items it has opened. */
typedef struct numla_responses_stream {
    int64_t seq;
    int reasoning_open;         /* the reasoning item's output_item.added sent */
    int reasoning_closed;       /* its reasoning_text.done and output_item.done sent */
    int message_open;           /* output_item.added and content_part.added sent */
    int32_t output_index;       /* of the next item */
    int32_t reasoning_index;    /* the reasoning item's output_index once open */
    int32_t message_index;      /* the message's output_index once open */
} numla_responses_stream;

/* response.created and response.in_progress onto out. */
numla_status numla_responses_stream_start(numla_responses_stream *st,
                                          const numla_openai_reply *r, const char *settings,
                                          numla_strbuf *out);
/* A piece of a thinking model's reasoning (opens the reasoning item first). Ignored once the
 * answer's text has begun. */
numla_status numla_responses_stream_reasoning(numla_responses_stream *st, const numla_openai_reply *r,
                                              const char *text, size_t len, numla_strbuf *out);
/* A piece of the answer's text (opens the message item first, closing the reasoning item, if
 * one is open, with its whole text reasoning). */
numla_status numla_responses_stream_text(numla_responses_stream *st, const numla_openai_reply *r,
                                         const char *text, size_t len, const char *reasoning,
                                         size_t reasoning_len, numla_strbuf *out);
/* The end: the message item's done events, each call's items, response.completed (or
 * response.incomplete) with the whole object of c. */
numla_status numla_responses_stream_end(numla_responses_stream *st, const numla_openai_reply *r,
                                        const char *settings, const numla_openai_choice *c,
                                        const numla_openai_usage *u, numla_strbuf *out);
/* An "error" event. */
numla_status numla_responses_stream_error(numla_responses_stream *st,
                                          const numla_openai_error *err, numla_strbuf *out);

#endif
