/* engine/model/rope.h — rotary position embedding with YaRN scaling (docs/design.md §5): the
 * config computes the inverse frequencies and attention factor once (config.c derive), the
 * forward pass builds a cos/sin table per token and rotates q_pe and k_pe with it. */
#ifndef NUMLA_ENGINE_ROPE_H
#define NUMLA_ENGINE_ROPE_H

#include <stdint.h>

#include "engine/model/config.h"

/* All local, pure functions. */

/* YaRN's mscale: 0.1 · mscale · ln(factor) + 1 for factor > 1, else 1. */
double numla_rope_yarn_mscale(double factor, double mscale);
/* Fill inv_freq[d/2] for rope dim d; factor <= 1 (or !yarn) gives plain θ^(-2i/d).
 * _ex: YaRN with truncate = 0 keeping the correction range unrounded. */
void numla_rope_inv_freq_ex(int64_t d, double theta, double factor, double original_max_pos,
                            double beta_fast, double beta_slow, int truncate, double *inv_freq);
void numla_rope_inv_freq(int64_t d, double theta, int yarn, double factor,
                         double original_max_pos, double beta_fast, double beta_slow,
                         double *inv_freq);
/* cos_sin (Dr): first Dr/2 entries cos(pos·inv_freq_i)·af, next Dr/2 sin(...)·af. */
void numla_rope_cos_sin(const numla_model_config *c, int32_t pos, float *cos_sin);
/* Rotate adjacent pairs (x_2i, x_2i+1) by angle i and store de-interleaved, as the reference
 * does: out[i] = x_2i·cos - x_2i+1·sin, out[i + Dr/2] = x_2i+1·cos + x_2i·sin. out != x. */
void numla_rope_apply(float *out, const float *x, const float *cos_sin, int64_t dr);

#endif
