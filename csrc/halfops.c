#include "halfops.h"

#include <string.h>

#include "xla/ffi/api/c_api.h"

float jm_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
  if (exp == 0 && man == 0) {
    bits = sign;
  } else if (exp == 0) { /* subnormal: normalise */
    int e = -1;
    do {
      e++;
      man <<= 1;
    } while (!(man & 0x400u));
    bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 112u) << 23) | (man << 13);
  }
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

static uint16_t round_shift(uint32_t m, int shift) {
  uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (r & 1u))) r++;
  return (uint16_t)r;
}

uint16_t jm_f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;  /* NaN */
  if (a >= 0x477ff000u) return sign | 0x7c00u; /* rounds to infinity */
  if (a >= 0x38800000u)                        /* normal */
    return sign | round_shift(a - 0x38000000u, 13);
  if (a < 0x33000000u) return sign;            /* rounds to zero */
  uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
  return sign | round_shift(m, (int)(126 - e)); /* subnormal */
}

float jm_bf16_to_f32(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t jm_f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

/* NaN-propagating, like numpy.maximum/minimum. */
static float max_f(float a, float b) { return (a > b || a != a) ? a : b; }
static float min_f(float a, float b) { return (a < b || a != a) ? a : b; }

#define JM_HALF_FN(t, kind, expr)                                              \
  static void half_##t##_##kind(void *in, void *inout, int *len,               \
                                jm_Datatype *type) {                           \
    (void)type;                                                                \
    const uint16_t *a = in;                                                    \
    uint16_t *b = inout;                                                       \
    for (int i = 0; i < *len; i++) {                                           \
      float x = jm_##t##_to_f32(a[i]), y = jm_##t##_to_f32(b[i]);              \
      b[i] = jm_f32_to_##t(expr);                                              \
    }                                                                          \
  }
#define JM_HALF_FNS(t)                                                         \
  JM_HALF_FN(t, sum, x + y)                                                    \
  JM_HALF_FN(t, prod, x *y)                                                    \
  JM_HALF_FN(t, max, max_f(x, y))                                              \
  JM_HALF_FN(t, min, min_f(x, y))
JM_HALF_FNS(f16)
JM_HALF_FNS(bf16)

static jm_User_function *const half_fns[2][JM_HALF_NKINDS] = {
    {half_f16_sum, half_f16_prod, half_f16_max, half_f16_min},
    {half_bf16_sum, half_bf16_prod, half_bf16_max, half_bf16_min},
};

/* Written once by jm_half_init, before any handler can run. */
static jm_Op half_ops[2][JM_HALF_NKINDS];
static int half_ready;

int jm_half_init(jm_Datatype *f16_type, jm_Datatype *bf16_type) {
  jm_Datatype *types[2] = {f16_type, bf16_type};
  for (int t = 0; t < 2; t++) {
    int rc = jm_mpi.Type_contiguous(2, jm_const.byte, types[t]);
    if (rc == 0) rc = jm_mpi.Type_commit(types[t]);
    if (rc) return rc;
    for (int k = 0; k < JM_HALF_NKINDS; k++) {
      rc = jm_mpi.Op_create(half_fns[t][k], 1, &half_ops[t][k]);
      if (rc) return rc;
    }
  }
  half_ready = 1;
  return 0;
}

int jm_half_op(int dtype, int kind, jm_Op *out) {
  int t = dtype == XLA_FFI_DataType_F16 ? 0 : dtype == XLA_FFI_DataType_BF16 ? 1 : -1;
  if (!half_ready || t < 0 || kind < 0 || kind >= JM_HALF_NKINDS) return -1;
  *out = half_ops[t][kind];
  return 0;
}
