/* engine/http/backend.h — what the HTTP server hands the serving loop, and how the loop answers.
 *
 * One HTTP generation request is a call; each of its prompts (completions may send a list) is
 * a job. The server parses and validates the body, puts the call's jobs on the backend's
 * bounded queue (full: 429) and waits. The serving loop on rank 0, between steps, takes jobs
 * with numla_http_backend_next, admits them to its scheduler, and as it generates:
 *
 *   numla_http_job_push(job, tokens, n, text, len, logprobs)   any number of times
 *   numla_http_job_finish(job, "stop"|"length", prompt, completion)  or
 *   numla_http_job_fail(job, http_status, message, param)      exactly one of the two, then
 *   numla_http_job_release(&job)                                the loop is done with it
 *
 * `text` is the decoded bytes of the pushed tokens and may end inside a UTF-8 character; the
 * server applies stop strings and character boundaries (emitter.h), so the loop needs neither.
 * numla_http_job_cancelled(job) turns 1 when the client went away or a stop string matched:
 * the loop then stops generating, frees the job's KV blocks, finishes it (any reason; for a
 * matched stop string the server answers "stop") and releases it. A job failed before any push
 * with a 4xx status (e.g. the prompt is longer than the context) gives the client that status
 * and message. A job released without finish or fail counts as a 500, so a client never hangs.
 * Chat jobs carry messages: the loop renders them with the model's chat template.
 *
 * Thread safety: every function here may be called from any thread; the loop's calls take only
 * the job's call mutex (short) and wake the waiting HTTP thread. Not collective (rank 0 only).
 */
#ifndef NUMLA_ENGINE_HTTP_BACKEND_H
#define NUMLA_ENGINE_HTTP_BACKEND_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "common/strbuf.h"
#include "engine/http/openai.h"
#include "engine/serving/sampler.h"

typedef struct numla_http_backend numla_http_backend;
typedef struct numla_http_job numla_http_job;
typedef struct numla_http_call numla_http_call;

/* max_queue: jobs waiting to be taken by the loop (>= 1). */
numla_status numla_http_backend_create(int32_t max_queue, numla_http_backend **out);
/* Fails the jobs still queued (503) and frees the backend; the server must be stopped first. */
void numla_http_backend_destroy(numla_http_backend **b);

/* ---- the serving loop's side ---- */

/* The oldest queued job, waiting up to wait_ms (0: do not wait); NULL when none. A job whose
 * client is already gone is still returned (cancelled is 1): finish and release it. */
numla_http_job *numla_http_backend_next(numla_http_backend *b, int32_t wait_ms);
/* Jobs queued and not yet taken. */
int32_t numla_http_backend_waiting(numla_http_backend *b);
/* The engine cannot serve any more (a rank died, shutdown): fail every queued job and every
 * later submission with 503 and `why`. Jobs already taken stay the loop's to finish. */
void numla_http_backend_close(numla_http_backend *b, const char *why);

/* The parsed request (shared by the call's jobs) and which of its prompts this job is. */
const numla_openai_request *numla_http_job_request(const numla_http_job *j);
int32_t numla_http_job_index(const numla_http_job *j);
/* The job's prompt: text or token ids (completions; tokenize's prompt; detokenize's ids);
 * NULL for chat and tokenize's messages. */
const numla_openai_prompt *numla_http_job_prompt(const numla_http_job *j);

/* n generated tokens, their decoded bytes (may be 0 bytes, or split a character), and their
 * logprobs (n entries, or NULL; ignored unless the request asked for logprobs). */
numla_status numla_http_job_push(numla_http_job *j, const int32_t *tokens, int32_t n,
                                 const char *text, size_t len, const numla_logprob_entry *lp);
void numla_http_job_finish(numla_http_job *j, const char *finish_reason, int32_t prompt_tokens,
                           int32_t completion_tokens);
/* Prompt tokens served from the prefix cache (usage.prompt_tokens_details); before finish. */
void numla_http_job_set_cached_tokens(numla_http_job *j, int32_t cached_tokens);
/* Speculative decoding's figures of the job (usage.speculative: numla_sched_output's verify
 * steps, draft tokens checked and accepted); before finish. */
void numla_http_job_set_speculative(numla_http_job *j, int32_t steps, int32_t drafted,
                                    int32_t accepted);
/* The prompt's logprobs (n entries, copied: the scheduler's prompt_logprobs, entry 0 without
 * a value) for completions' echo; before finish. */
numla_status numla_http_job_set_prompt_logprobs(numla_http_job *j, const numla_logprob_entry *lp,
                                                int32_t n);
/* http_status: 400 for a request the model cannot take (param names the field, may be NULL),
 * 500/503 for engine failures. */
void numla_http_job_fail(numla_http_job *j, int http_status, const char *message,
                         const char *param);
int numla_http_job_cancelled(numla_http_job *j);
void numla_http_job_release(numla_http_job **j);

/* ---- the HTTP side (server.c; tests) ---- */

/* The state of one job as the HTTP thread sees it; fields under call->mu. */
struct numla_http_job {
    numla_http_call *call;
    int32_t index;
    numla_http_job *next;       /* queue link */
    int32_t *tokens;            /* (num_tokens) pushed so far */
    int32_t num_tokens, cap_tokens;
    numla_logprob_entry *logprobs;          /* (num_tokens) when the request wants them */
    numla_strbuf text;          /* pushed bytes */
    size_t *text_ends;          /* (num_tokens) text.len once each token's bytes were pushed
                                   (a push's bytes belong to its last token; a push of bytes
                                   without tokens extends nothing: the writer takes them as a
                                   tail), so a stream can show one token per event */
    int finished;               /* finish, fail or release happened */
    char finish_reason[16];
    int32_t prompt_tokens, completion_tokens;
    int32_t cached_tokens;      /* of prompt_tokens, served from the prefix cache */
    int speculative;            /* numla_http_job_set_speculative was called */
    int32_t spec_steps, spec_drafted, spec_accepted;
    numla_logprob_entry *prompt_logprobs;   /* (num_prompt_logprobs) echo with logprobs */
    int32_t num_prompt_logprobs;
    numla_openai_error error;   /* status 0: none */
    int stop_hit;               /* the server matched a stop string */
    int released;               /* the loop let go */
    double t_first, t_finish;   /* monotonic seconds; 0: not yet */
    int reasoning_mode;         /* numla_http_reasoning_mode; set by the loop before any push */
    const numla_tool_syntax *tool_syntax; /* chat: the template family's tool-call syntax
                                   (engine/text/tool_calls.h), NULL: none; set with the above */
};

struct numla_http_call {
    pthread_mutex_t mu;
    pthread_cond_t cv;          /* signalled on every push, finish, fail and release */
    int32_t refs;               /* the HTTP side + each job not yet released by the loop */
    int cancelled;              /* the client went away */
    numla_openai_request req;
    int32_t num_jobs;
    numla_http_job *jobs;       /* (num_jobs) one per prompt (chat: one) */
    double t_arrival;           /* numla_now_s() */
};

/* Takes ownership of *req (left empty). */
numla_status numla_http_call_create(numla_openai_request *req, numla_http_call **out);
/* Queue the call's jobs: 0 queued; 429 the queue has no room for them all; 503 closed. */
int numla_http_backend_submit(numla_http_backend *b, numla_http_call *c,
                              numla_openai_error *err);
/* The client went away: every job reads cancelled. */
void numla_http_call_cancel(numla_http_call *c);
/* The HTTP side lets go (the loop may still hold jobs; the last one out frees the call). */
void numla_http_call_release(numla_http_call **c);

#endif
