/* float16 and bfloat16 for MPI: a 2-byte datatype each and our own
 * reduction ops. Each pairwise combination converts both operands to float32,
 * combines them there, and rounds the result back once (round to nearest
 * even), as GPU collective libraries do. */
#ifndef JAXMPI_HALFOPS_H
#define JAXMPI_HALFOPS_H

#include <stdint.h>

#include "mpi_api.h"

enum { JM_HALF_SUM, JM_HALF_PROD, JM_HALF_MAX, JM_HALF_MIN, JM_HALF_NKINDS };

float jm_f16_to_f32(uint16_t h);
uint16_t jm_f32_to_f16(float f);
float jm_bf16_to_f32(uint16_t h);
uint16_t jm_f32_to_bf16(float f);

/* Create the datatypes and ops (once, at configuration). */
int jm_half_init(jm_Datatype *f16_type, jm_Datatype *bf16_type);
/* The op for (XLA dtype F16 or BF16, kind), or -1 if there is none. */
int jm_half_op(int dtype, int kind, jm_Op *out);

#endif
