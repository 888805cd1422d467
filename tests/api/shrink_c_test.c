/* terse_comm_shrink from plain C under terse-run (issue #48): on request, the last rank is left
 * out while it lives (it leaves without calling shrink); the others shrink, check their dense
 * ranks and allreduce on the new communicator. An error-feedback state used before the shrink is
 * re-laid out for the new world (terse_feedback_relayout): its worker residual stays, its server
 * residual becomes the new world's chunk, and a NULL state on one rank fails every rank. Needs a
 * store that outlives the ranks' order of leaving (terse-run --store <dir>). Exits non-zero with a
 * message on the first failed check. */
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

/* 3 chunks of 2048 and 5: the old world's 4 ranks own 2048, 2048, 2048 and 5 elements of it, the
 * new world's 3 own 4096, 2048 and 5 (the allreduce's chunks are whole 2048-element units). */
enum { kFeedbackCount = 3 * 2048 + 5 };

static size_t serialized_size(const terse_feedback_t* fb) {
  size_t size = 0;
  terse_feedback_serialize(fb, NULL, &size);
  return size;
}

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
  /* Residuals from a onebit allreduce in the old world. */
  terse_feedback_t* fb = NULL;
  CHECK(terse_feedback_create("onebit", kFeedbackCount, &fb) == TERSE_OK, "feedback");
  static float grad[kFeedbackCount], avg[kFeedbackCount], worker[kFeedbackCount];
  for (int i = 0; i < kFeedbackCount; ++i) grad[i] = (float)((i * 7 + rank * 3) % 11) - 5.0f;
  CHECK(terse_allreduce(comm, grad, avg, kFeedbackCount, TERSE_FLOAT32, TERSE_AVG, "onebit", fb) ==
            TERSE_OK,
        "onebit allreduce before the shrink");
  float* residual = NULL;
  CHECK(terse_feedback_worker(fb, &residual) == TERSE_OK, "worker residual");
  for (int i = 0; i < kFeedbackCount; ++i) worker[i] = residual[i];
  if (rank == n - 1) {
    terse_feedback_destroy(fb);
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

  /* A NULL state on one rank fails the relayout on every rank, and changes nothing. */
  terse_feedback_t* none[1] = {rank == 0 ? NULL : fb};
  const size_t before = serialized_size(fb);
  s = terse_feedback_relayout(next, rank, n, none, 1);
  CHECK(s == TERSE_INVALID_ARGUMENT, "relayout with a NULL state: %s", terse_status_name(s));
  CHECK(serialized_size(fb) == before, "a refused relayout changed the state");
  CHECK(terse_feedback_relayout(NULL, rank, n, &fb, 1) == TERSE_INVALID_ARGUMENT, "NULL comm");

  s = terse_feedback_relayout(next, rank, n, &fb, 1);
  CHECK(s == TERSE_OK, "terse_feedback_relayout: %s", terse_status_name(s));
  CHECK(terse_feedback_worker(fb, &residual) == TERSE_OK, "worker residual");
  for (int i = 0; i < kFeedbackCount; ++i)
    CHECK(residual[i] == worker[i], "worker residual changed at %d", i);
  /* The serialized state holds the worker residual and the server chunk: a fresh state of the
   * same codec and count holds no chunk, so the difference is the new chunk's 4-byte floats. */
  if (n == 4) {
    terse_feedback_t* fresh = NULL;
    CHECK(terse_feedback_create("onebit", kFeedbackCount, &fresh) == TERSE_OK, "fresh");
    const size_t want[3] = {4096, 2048, 5};
    CHECK(serialized_size(fb) - serialized_size(fresh) == 4 * want[rank],
          "rank %d keeps %zu server bytes, want %zu", rank,
          serialized_size(fb) - serialized_size(fresh), 4 * want[rank]);
    terse_feedback_destroy(fresh);
  }
  CHECK(terse_allreduce(next, grad, avg, kFeedbackCount, TERSE_FLOAT32, TERSE_AVG, "onebit", fb) ==
            TERSE_OK,
        "onebit allreduce after the relayout");
  terse_feedback_destroy(fb);
  terse_comm_destroy(next);
  terse_comm_destroy(comm);
  printf("rank %d: shrunk to %d ranks\n", rank, n - 1);
  return 0;
}
