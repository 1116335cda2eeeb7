/* engine/model/rope.c — rotary position embedding, all of it (rope.h): the YaRN frequencies
 * and attention factor the config derives once (docs/design.md §5), the per-position cos/sin table
 * and the rotation the attention applies to q_pe and k_pe. */
#include "engine/model/rope.h"

#include <math.h>

double numla_rope_yarn_mscale(double factor, double mscale)
{
    if (factor <= 1.0)
        return 1.0;
    return 0.1 * mscale * log(factor) + 1.0;
}

static double yarn_correction_dim(double rotations, int64_t d, double theta, double l0)
{
    return (double)d * log(l0 / (rotations * 2.0 * M_PI)) / (2.0 * log(theta));
}

void numla_rope_inv_freq(int64_t d, double theta, int yarn, double factor,
                         double original_max_pos, double beta_fast, double beta_slow,
                         double *inv_freq)
{
    if (yarn && factor > 1.0) {
        numla_rope_inv_freq_ex(d, theta, factor, original_max_pos, beta_fast, beta_slow, 1,
                               inv_freq);
        return;
    }
    for (int64_t i = 0; i < d / 2; i++)
        inv_freq[i] = 1.0 / pow(theta, (double)(2 * i) / (double)d);
}

void numla_rope_inv_freq_ex(int64_t d, double theta, double factor, double original_max_pos,
                            double beta_fast, double beta_slow, int truncate, double *inv_freq)
{
    int64_t half = d / 2;
    double low = 0, high = 1;
    int scaled = factor > 1.0;
    if (scaled) {
        low = yarn_correction_dim(beta_fast, d, theta, original_max_pos);
        high = yarn_correction_dim(beta_slow, d, theta, original_max_pos);
        if (truncate) {
            low = floor(low);
            high = ceil(high);
        }
        if (low < 0)
            low = 0;
        if (high > (double)(d - 1))
            high = (double)(d - 1);
        if (low == high)
            high += 0.001;
    }
    for (int64_t i = 0; i < half; i++) {
        double base = pow(theta, (double)(2 * i) / (double)d);
        if (!scaled) {
            inv_freq[i] = 1.0 / base;
            continue;
        }
        double ramp = ((double)i - low) / (high - low);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        inv_freq[i] = ramp / (factor * base) + (1.0 - ramp) / base;
    }
}

void numla_rope_cos_sin(const numla_model_config *c, int32_t pos, float *cos_sin)
{
    int64_t half = c->qk_rope_head_dim / 2;
    float af = (float)c->rope_attention_factor;
    for (int64_t i = 0; i < half; i++) {
        /* fp32 angle like the reference (positions × fp32 inv_freq). */
        float ang = (float)pos * (float)c->rope_inv_freq[i];
        cos_sin[i] = (float)cos((double)ang) * af;
        cos_sin[half + i] = (float)sin((double)ang) * af;
    }
}

void numla_rope_apply(float *out, const float *x, const float *cos_sin, int64_t dr)
{
    int64_t half = dr / 2;
    for (int64_t i = 0; i < half; i++) {
        float a = x[2 * i], b = x[2 * i + 1], cs = cos_sin[i], sn = cos_sin[half + i];
        out[i] = a * cs - b * sn;
        out[half + i] = b * cs + a * sn;
    }
}
