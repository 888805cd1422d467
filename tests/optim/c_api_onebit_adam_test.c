/* OneBitAdam through libterse.so from C, as a world of one: options and their size guard, steps
 * across the freeze, checkpoint size query / round trip / corruption, and NULL arguments. */
#include "c_check.h"

#include <terse/terse.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
  enum { N = 3000 };
  static float params[N], grads[N], again[N];
  terse_comm_t* comm = NULL;
  if (terse_comm_create(&comm) != TERSE_OK) {
    fprintf(stderr, "terse_comm_create: %s\n", terse_last_error());
    return 1;
  }
  terse_onebit_adam_options_t o;
  terse_onebit_adam_options_default(&o);
  CHECK(o.struct_size == sizeof o && o.beta1 == 0.9f && o.warmup_steps == 100);
  o.warmup_steps = 2;
  o.codec = "onebit";
  terse_onebit_adam_t* adam = NULL;

  terse_onebit_adam_options_t wrong = o;
  wrong.struct_size = sizeof o - 8;
  CHECK(terse_onebit_adam_create(N, &wrong, &adam) == TERSE_INVALID_ARGUMENT);
  CHECK(strstr(terse_last_error(), "struct_size") != NULL);
  wrong = o;
  wrong.beta2 = 1.0f;
  CHECK(terse_onebit_adam_create(N, &wrong, &adam) == TERSE_INVALID_ARGUMENT);
  wrong = o;
  wrong.codec = "nonsense";
  CHECK(terse_onebit_adam_create(N, &wrong, &adam) == TERSE_INVALID_ARGUMENT);
  CHECK(terse_onebit_adam_create(N, NULL, &adam) == TERSE_INVALID_ARGUMENT);
  CHECK(terse_onebit_adam_steps(NULL) == -1);

  CHECK(terse_onebit_adam_create(N, &o, &adam) == TERSE_OK);
  for (int i = 0; i < N; ++i) params[i] = 0.01f * (float)(i % 17);
  for (int step = 0; step < 4; ++step) {
    for (int i = 0; i < N; ++i) grads[i] = sinf(0.1f * (float)i + (float)step);
    CHECK(terse_onebit_adam_step(adam, comm, params, grads, 1e-2f) == TERSE_OK);
  }
  CHECK(terse_onebit_adam_steps(adam) == 4);
  CHECK(terse_onebit_adam_frozen_at(adam) == 2);
  CHECK(terse_onebit_adam_step(adam, comm, NULL, grads, 1e-2f) == TERSE_INVALID_ARGUMENT);
  CHECK(terse_onebit_adam_step(adam, NULL, params, grads, 1e-2f) == TERSE_INVALID_ARGUMENT);

  size_t size = 0;
  CHECK(terse_onebit_adam_serialize(adam, NULL, &size) == TERSE_OK && size > 8 * N);
  unsigned char* bytes = malloc(size);
  size_t small = size - 1;
  CHECK(terse_onebit_adam_serialize(adam, bytes, &small) == TERSE_INVALID_ARGUMENT);
  CHECK(terse_onebit_adam_serialize(adam, bytes, &size) == TERSE_OK);
  terse_onebit_adam_t* copy = NULL;
  CHECK(terse_onebit_adam_deserialize(bytes, size, &copy) == TERSE_OK);
  CHECK(terse_onebit_adam_steps(copy) == 4 && terse_onebit_adam_frozen_at(copy) == 2);
  /* One more step on each: the same result. */
  memcpy(again, params, sizeof params);
  CHECK(terse_onebit_adam_step(adam, comm, params, grads, 1e-2f) == TERSE_OK);
  CHECK(terse_onebit_adam_step(copy, comm, again, grads, 1e-2f) == TERSE_OK);
  CHECK(memcmp(params, again, sizeof params) == 0);
  /* Without residuals the next step differs (onebit's residuals are nonzero by now). */
  terse_onebit_adam_reset_residuals(copy);
  terse_onebit_adam_reset_residuals(NULL);
  CHECK(terse_onebit_adam_step(adam, comm, params, grads, 1e-2f) == TERSE_OK);
  CHECK(terse_onebit_adam_step(copy, comm, again, grads, 1e-2f) == TERSE_OK);
  CHECK(memcmp(params, again, sizeof params) != 0);
  bytes[size / 2] ^= 1;
  terse_onebit_adam_t* bad = NULL;
  CHECK(terse_onebit_adam_deserialize(bytes, size, &bad) == TERSE_CORRUPT && bad == NULL);
  CHECK(terse_onebit_adam_deserialize(bytes, 5, &bad) == TERSE_CORRUPT);

  /* terse_onebit_adam_shrink refuses NULLs (optim_shrink_process_test runs it after a kill). */
  CHECK(terse_onebit_adam_shrink(NULL, comm) == TERSE_INVALID_ARGUMENT);
  CHECK(terse_onebit_adam_shrink(adam, NULL) == TERSE_INVALID_ARGUMENT);

  free(bytes);
  terse_onebit_adam_destroy(copy);
  terse_onebit_adam_destroy(adam);
  terse_onebit_adam_destroy(NULL);
  terse_comm_destroy(comm);
  if (failures) return 1;
  printf("OneBitAdam C API: all checks passed\n");
  return 0;
}
