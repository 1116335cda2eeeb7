/* common/dtype.c — IEEE binary16 and OCP e4m3fn conversions (scalar; exact in both directions
 * where defined). */
#include "common/dtype.h"

const char *numla_dtype_name(numla_dtype t)
{
    switch (t) {
    case NUMLA_DTYPE_F32: return "f32";
    case NUMLA_DTYPE_F16: return "f16";
    case NUMLA_DTYPE_BF16: return "bf16";
    case NUMLA_DTYPE_F8_E4M3: return "f8_e4m3";
    case NUMLA_DTYPE_I8: return "i8";
    case NUMLA_DTYPE_I32: return "i32";
    case NUMLA_DTYPE_I64: return "i64";
    case NUMLA_DTYPE_F8_E8M0: return "f8_e8m0";
    default: return "?";
    }
}

float numla_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                man <<= 1;
                e++;
            } while (!(man & 0x400u));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t numla_f32_to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u) /* rounds to >= 65520: inf */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        if (a < 0x33000000u)
            return (uint16_t)sign;
        uint32_t e = a >> 23;
        uint32_t m = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e; /* 14..24 */
        uint32_t r = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1u)))
            r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = a - 0x38000000u; /* rebias exponent 127 -> 15 */
    r += 0xfffu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
}

float numla_e4m3_to_f32(uint8_t b)
{
    uint32_t sign = (uint32_t)(b & 0x80u) << 24;
    uint32_t exp = (b >> 3) & 0xfu, man = b & 7u;
    uint32_t u;
    if ((b & 0x7fu) == 0x7fu) {
        u = sign | 0x7fc00000u;
    } else if (exp == 0) { /* zero or subnormal: man * 2^-9 */
        float f = (float)man * 0x1p-9f;
        memcpy(&u, &f, 4);
        u |= sign;
    } else {
        u = sign | ((exp + 127 - 7) << 23) | (man << 20);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint8_t numla_f32_to_e4m3(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint8_t sign = (uint8_t)(u >> 24) & 0x80u;
    uint32_t a = u & 0x7fffffffu;
    /* >= 480, inf, NaN: NaN. (464, 480) rounds up to the pattern 0x7f below: NaN as well. */
    if (a >= 0x43f00000u)
        return (uint8_t)(sign | 0x7fu);
    if (a < 0x3c800000u) { /* below 2^-6, the smallest normal: units of 2^-9, nearest even */
        float x;
        memcpy(&x, &a, 4);
        /* In x + 2^14 the float's last mantissa bit is worth 2^-9, so the FPU's own
         * round-to-nearest-even rounds; the low bits are then the count of 2^-9 units (8 is
         * 2^-6, which is exactly the code of the smallest normal). */
        float y = x + 16384.0f;
        uint32_t v;
        memcpy(&v, &y, 4);
        return (uint8_t)(sign | (uint8_t)(v - 0x46800000u));
    }
    uint32_t odd = (a >> 20) & 1u; /* the kept mantissa's last bit, for ties to even */
    a += ((uint32_t)(7 - 127) << 23) + 0x7ffffu + odd;
    return (uint8_t)(sign | (uint8_t)(a >> 20));
}
