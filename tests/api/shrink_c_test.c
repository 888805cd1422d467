/* terse_comm_shrink from plain C under terse-run (issue #48): on request, the last rank is left
 * out while it lives (it leaves without calling shrink); the others shrink, check their dense
 * ranks and allreduce on the new communicator. Needs a store that outlives the ranks' order of
 * leaving (terse-run --store <dir>). Exits non-zero with a message on the first failed check. */
#include <terse/terse.h>

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond, ...)                                          \
  do {                                                            \
    if (!(cond)) {                                                \
      fprintf(stderr, "shrink_c_test:%d: ", __LINE__);            \
      fprintf(stderr, __VA_ARGS__);                               \
      fprintf(stderr, " [last error: %s]\n", terse_last_error()); \
      return 1;                                                   \
    }                                                             \
  } while (0)

enum { kCount = 4099 };

static int sum_is(terse_comm_t* comm, int world_rank, float want) {
  static float in[kCount], out[kCount];
  for (int i = 0; i < kCount; ++i) in[i] = (float)(world_rank + 1);
  terse_status_t s = terse_allreduce(comm, in, out, kCount, TERSE_FLOAT32, TERSE_SUM, NULL, NULL);
  if (s != TERSE_OK) return 0;
  for (int i = 0; i < kCount; ++i)
    if (out[i] != want) return 0;
  return 1;
}

int main(void) {
  terse_comm_t* comm = NULL;
  terse_status_t s = terse_comm_create(&comm);
  CHECK(s == TERSE_OK, "terse_comm_create: %s", terse_status_name(s));
  const int n = terse_comm_size(comm), rank = terse_comm_rank(comm);
  CHECK(n >= 2, "needs 2 ranks or more, has %d", n);
  CHECK(sum_is(comm, rank, n * (n + 1) / 2.0f), "allreduce before the shrink");
  CHECK(terse_comm_shrink(comm, NULL, 0, NULL) == TERSE_INVALID_ARGUMENT, "NULL out");
  if (rank == n - 1) {
    terse_comm_destroy(comm); /* left out on request: it just leaves */
    return 0;
  }
  const int leave[1] = {n - 1};
  terse_comm_t* next = NULL;
  s = terse_comm_shrink(comm, leave, 1, &next);
  CHECK(s == TERSE_OK && next != NULL, "terse_comm_shrink: %s", terse_status_name(s));
  CHECK(terse_comm_size(next) == n - 1 && terse_comm_rank(next) == rank, "rank %d of %d",
        terse_comm_rank(next), terse_comm_size(next));
  CHECK(sum_is(next, rank, (n - 1) * n / 2.0f), "allreduce after the shrink");
  terse_comm_destroy(next);
  terse_comm_destroy(comm);
  printf("rank %d: shrunk to %d ranks\n", rank, n - 1);
  return 0;
}
