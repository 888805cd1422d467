/* ShardedOneBitAdam through libterse.so from C, as a world of one: options and their size guard,
 * steps across the freeze, the shard and state size queries, checkpoint parts (round trip,
 * re-sharding to another world size, corruption) and NULL arguments. */
#include <terse/terse.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;
#define CHECK(cond)                                                                \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      fprintf(stderr, "%s:%d: CHECK(%s) failed (%s)\n", __FILE__, __LINE__, #cond, \
              terse_last_error());                                                 \
      ++failures;                                                                  \
    }                                                                              \
  } while (0)

int main(void) {
  enum { N = 3001 };
  static float params[N], grads[N], again[N], start[N];
  terse_comm_t* comm = NULL;
  if (terse_comm_create(&comm) != TERSE_OK) {
    fprintf(stderr, "terse_comm_create: %s\n", terse_last_error());
    return 1;
  }
  terse_sharded_onebit_adam_options_t o;
  terse_sharded_onebit_adam_options_default(&o);
  CHECK(o.struct_size == sizeof o && o.beta1 == 0.9f && o.warmup_steps == 100 &&
        o.error_feedback == 0 && o.codec == NULL);
  o.warmup_steps = 2;
  o.codec = "onebit";
  o.error_feedback = 1;
  terse_sharded_onebit_adam_t* adam = NULL;

  terse_sharded_onebit_adam_options_t wrong = o;
  wrong.struct_size = sizeof o - 8;
  CHECK(terse_sharded_onebit_adam_create(N, 1, 0, &wrong, &adam) == TERSE_INVALID_ARGUMENT);
  CHECK(strstr(terse_last_error(), "struct_size") != NULL);
  wrong = o;
  wrong.warmup_steps = 0;
  CHECK(terse_sharded_onebit_adam_create(N, 1, 0, &wrong, &adam) == TERSE_INVALID_ARGUMENT);
  CHECK(terse_sharded_onebit_adam_create(N, 1, 1, &o, &adam) == TERSE_INVALID_ARGUMENT);
  CHECK(terse_sharded_onebit_adam_create(N, 1, 0, NULL, &adam) == TERSE_INVALID_ARGUMENT);
  CHECK(terse_sharded_onebit_adam_steps(NULL) == -1);
  CHECK(terse_sharded_onebit_adam_state_bytes(NULL) == 0);

  /* A state for rank 0 of 2 refuses this world of one. */
  CHECK(terse_sharded_onebit_adam_create(N, 2, 0, &o, &adam) == TERSE_OK);
  CHECK(terse_sharded_onebit_adam_step(adam, comm, params, grads, 1e-2f) == TERSE_INVALID_ARGUMENT);
  terse_sharded_onebit_adam_destroy(adam);

  CHECK(terse_sharded_onebit_adam_create(N, 1, 0, &o, &adam) == TERSE_OK);
  for (int i = 0; i < N; ++i) start[i] = params[i] = 0.01f * (float)(i % 17);
  for (int step = 0; step < 4; ++step) {
    for (int i = 0; i < N; ++i) grads[i] = sinf(0.1f * (float)i + (float)step);
    CHECK(terse_sharded_onebit_adam_step(adam, comm, params, grads, 1e-2f) == TERSE_OK);
  }
  CHECK(memcmp(params, start, sizeof params) != 0);
  CHECK(terse_sharded_onebit_adam_steps(adam) == 4);
  CHECK(terse_sharded_onebit_adam_frozen_at(adam) == 2);
  size_t off = 99, len = 0;
  CHECK(terse_sharded_onebit_adam_shard(adam, &off, &len) == TERSE_OK && off == 0 && len == N);
  /* m, v (4 bytes each), the exponents (1) and the worker residual (4) per element. */
  CHECK(terse_sharded_onebit_adam_state_bytes(adam) == (size_t)13 * N);
  CHECK(terse_sharded_onebit_adam_step(adam, comm, NULL, grads, 1e-2f) == TERSE_INVALID_ARGUMENT);
  CHECK(terse_sharded_onebit_adam_step(adam, NULL, params, grads, 1e-2f) == TERSE_INVALID_ARGUMENT);

  size_t size = 0;
  CHECK(terse_sharded_onebit_adam_serialize(adam, NULL, &size) == TERSE_OK && size > 8 * N);
  unsigned char* bytes = malloc(size);
  size_t small = size - 1;
  CHECK(terse_sharded_onebit_adam_serialize(adam, bytes, &small) == TERSE_INVALID_ARGUMENT);
  CHECK(terse_sharded_onebit_adam_serialize(adam, bytes, &size) == TERSE_OK);
  const void* parts[1] = {bytes};
  size_t sizes[1] = {size};
  terse_sharded_onebit_adam_t* copy = NULL;
  CHECK(terse_sharded_onebit_adam_deserialize(parts, sizes, 1, 1, 0, &copy) == TERSE_OK);
  CHECK(terse_sharded_onebit_adam_steps(copy) == 4 &&
        terse_sharded_onebit_adam_frozen_at(copy) == 2);
  memcpy(again, params, sizeof params);
  CHECK(terse_sharded_onebit_adam_step(adam, comm, params, grads, 1e-2f) == TERSE_OK);
  CHECK(terse_sharded_onebit_adam_step(copy, comm, again, grads, 1e-2f) == TERSE_OK);
  CHECK(memcmp(params, again, sizeof params) == 0);
  /* Re-sharded for rank 1 of 2: the second half of the moments. */
  terse_sharded_onebit_adam_t* half = NULL;
  CHECK(terse_sharded_onebit_adam_deserialize(parts, sizes, 1, 2, 1, &half) == TERSE_OK);
  CHECK(terse_sharded_onebit_adam_shard(half, &off, &len) == TERSE_OK && off == 1501 &&
        len == 1500);
  /* Corrupt, truncated, missing. */
  bytes[size / 2] ^= 1;
  terse_sharded_onebit_adam_t* bad = NULL;
  CHECK(terse_sharded_onebit_adam_deserialize(parts, sizes, 1, 1, 0, &bad) == TERSE_CORRUPT &&
        bad == NULL);
  sizes[0] = 5;
  CHECK(terse_sharded_onebit_adam_deserialize(parts, sizes, 1, 1, 0, &bad) == TERSE_CORRUPT);
  CHECK(terse_sharded_onebit_adam_deserialize(parts, sizes, 0, 1, 0, &bad) ==
        TERSE_INVALID_ARGUMENT);
  CHECK(terse_sharded_onebit_adam_deserialize(NULL, sizes, 1, 1, 0, &bad) ==
        TERSE_INVALID_ARGUMENT);

  free(bytes);
  terse_sharded_onebit_adam_destroy(half);
  terse_sharded_onebit_adam_destroy(copy);
  terse_sharded_onebit_adam_destroy(adam);
  terse_sharded_onebit_adam_destroy(NULL);
  terse_comm_destroy(comm);
  if (failures) return 1;
  printf("ShardedOneBitAdam C API: all checks passed\n");
  return 0;
}
