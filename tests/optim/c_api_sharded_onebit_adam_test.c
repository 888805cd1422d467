/* ShardedOneBitAdam through libterse.so from C. Two forked ranks over a file store: the
 * reduce/update split against step() and a refused second reduce. Then a world of one: options and
 * their size guard, steps across the freeze, the shard and state size queries, checkpoint parts
 * (round trip, re-sharding to another world size, corruption), NULL arguments, local momentum
 * (and a struct of the first release, which ends before it) and the split's misuse. */
#define _XOPEN_SOURCE 700 /* fork, waitpid, setenv, mkdtemp under -std=c99 */

#include "c_check.h"

#include <terse/terse.h>

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

/* One rank of a two-process world over the file store `store`: reduce + update on the rank's
 * shard + terse_allgather give step()'s parameters bit for bit across the freeze (local
 * momentum, onebit + error feedback); then rank 0 reduces twice and rank 1, which finished its
 * step, has its next reduce fail at once (not by the timeout); then warm-up lengths that differ
 * between the ranks are refused at the first step on both. Returns the failed checks. */
static int twoRanks(int rank, const char* store) {
  enum { M = 5001 };
  static float params[M], split[M], grads[M], reduced[M], shard[M], start[M];
  char value[16];
  snprintf(value, sizeof value, "%d", rank);
  setenv("TERSE_RANK", value, 1);
  setenv("TERSE_LOCAL_RANK", value, 1);
  setenv("TERSE_WORLD_SIZE", "2", 1);
  setenv("TERSE_STORE", store, 1);
  setenv("TERSE_TIMEOUT_MS", "60000", 1);
  terse_comm_t* comm = NULL;
  if (terse_comm_create(&comm) != TERSE_OK) {
    fprintf(stderr, "rank %d: terse_comm_create: %s\n", rank, terse_last_error());
    return 1;
  }
  terse_sharded_onebit_adam_options_t o;
  terse_sharded_onebit_adam_options_default(&o);
  o.warmup_steps = 2;
  o.codec = "onebit";
  o.error_feedback = 1;
  o.local_momentum = 1;
  terse_sharded_onebit_adam_t *byStep = NULL, *bySplit = NULL;
  CHECK(terse_sharded_onebit_adam_create(M, 2, rank, &o, &byStep) == TERSE_OK);
  CHECK(terse_sharded_onebit_adam_create(M, 2, rank, &o, &bySplit) == TERSE_OK);
  size_t off = 0, len = 0;
  CHECK(terse_sharded_onebit_adam_shard(bySplit, &off, &len) == TERSE_OK && len > 0);
  for (int i = 0; i < M; ++i) start[i] = params[i] = split[i] = 0.01f * (float)(i % 23);
  for (int step = 0; step < 6 && failures == 0; ++step) {
    for (int i = 0; i < M; ++i) grads[i] = sinf(0.1f * (float)i + (float)step) + 0.5f * rank;
    CHECK(terse_sharded_onebit_adam_step(byStep, comm, params, grads, 1e-2f) == TERSE_OK);
    CHECK(terse_sharded_onebit_adam_reduce(bySplit, comm, grads, reduced) == TERSE_OK);
    memcpy(shard, split + off, len * sizeof(float));
    CHECK(terse_sharded_onebit_adam_update(bySplit, comm, shard, reduced, 1e-2f) == TERSE_OK);
    CHECK(terse_allgather(comm, shard, split, M, TERSE_FLOAT32, NULL, NULL) == TERSE_OK);
  }
  CHECK(memcmp(params, split, sizeof params) == 0);
  CHECK(memcmp(params, start, sizeof params) != 0);
  CHECK(terse_sharded_onebit_adam_frozen_at(bySplit) == 2 &&
        terse_sharded_onebit_adam_steps(bySplit) == 6);
  if (failures == 0) {
    CHECK(terse_sharded_onebit_adam_reduce(bySplit, comm, grads, reduced) == TERSE_OK);
    if (rank == 0) {
      CHECK(terse_sharded_onebit_adam_reduce(bySplit, comm, grads, reduced) == TERSE_INVALID_USAGE);
    } else {
      memcpy(shard, split + off, len * sizeof(float));
      CHECK(terse_sharded_onebit_adam_update(bySplit, comm, shard, reduced, 1e-2f) == TERSE_OK);
      terse_status_t st = terse_sharded_onebit_adam_reduce(bySplit, comm, grads, reduced);
      CHECK(st != TERSE_OK && st != TERSE_TIMEOUT);
      CHECK(strstr(terse_last_error(), "rank 0 rejected") != NULL);
    }
  }
  /* Warm-up lengths that differ between the ranks (2 and 3): the first step fails on both,
   * naming the option, before any collective could pair with another kind (issue 44). The
   * communicator stays usable: a state both ranks agree on steps afterwards. */
  terse_sharded_onebit_adam_t* mixed = NULL;
  o.warmup_steps = 2 + rank;
  CHECK(terse_sharded_onebit_adam_create(M, 2, rank, &o, &mixed) == TERSE_OK);
  memcpy(params, start, sizeof params);
  CHECK(terse_sharded_onebit_adam_step(mixed, comm, params, grads, 1e-2f) ==
        TERSE_INVALID_ARGUMENT);
  CHECK(strstr(terse_last_error(),
               "warmup_steps differs between ranks: rank 0 has 2, rank 1 has 3") != NULL);
  CHECK(terse_sharded_onebit_adam_steps(mixed) == 0 && memcmp(params, start, sizeof params) == 0);
  terse_sharded_onebit_adam_destroy(mixed);
  o.warmup_steps = 2;
  CHECK(terse_sharded_onebit_adam_create(M, 2, rank, &o, &mixed) == TERSE_OK);
  CHECK(terse_sharded_onebit_adam_step(mixed, comm, params, grads, 1e-2f) == TERSE_OK);
  terse_sharded_onebit_adam_destroy(mixed);
  /* The buddy copy (issue #48): then rank 1 is asked out, and rank 0 goes on alone with rank 1's
   * shard rebuilt from its copy (the file store outlives the shrink). */
  terse_sharded_onebit_adam_t* buddy = NULL;
  CHECK(terse_sharded_onebit_adam_create(M, 2, rank, &o, &buddy) == TERSE_OK);
  CHECK(terse_sharded_onebit_adam_set_buddy_copy(NULL, 1) == TERSE_INVALID_ARGUMENT);
  CHECK(terse_sharded_onebit_adam_set_buddy_copy(buddy, 1) == TERSE_OK);
  CHECK(terse_sharded_onebit_adam_buddy_bytes(buddy) == 0);
  const size_t plain = terse_sharded_onebit_adam_state_bytes(buddy);
  for (int s = 0; s < 3; ++s)
    CHECK(terse_sharded_onebit_adam_step(buddy, comm, params, grads, 1e-2f) == TERSE_OK);
  /* After the freeze: the partner's m and v shard (rank 0 holds rank 1's 2500 elements, rank 1
   * rank 0's 2501), local momentum and worker residual. */
  CHECK(terse_sharded_onebit_adam_buddy_bytes(buddy) == 8 * (M / 2 + (size_t)rank) + 8 * M);
  CHECK(terse_sharded_onebit_adam_state_bytes(buddy) > plain);
  if (rank == 0) {
    terse_comm_t* alone = NULL;
    const int out[1] = {1};
    size_t off = 1, len = 0;
    CHECK(terse_comm_shrink(comm, out, 1, &alone) == TERSE_OK);
    CHECK(terse_sharded_onebit_adam_shrink(buddy, alone, NULL, NULL, 1) == TERSE_INVALID_ARGUMENT);
    CHECK(terse_sharded_onebit_adam_shrink(NULL, alone, NULL, NULL, 0) == TERSE_INVALID_ARGUMENT);
    /* The gathering alone first: both old ranks' parts, the state left as it was. */
    size_t bytes = 1;
    CHECK(terse_sharded_onebit_adam_shrunk_parts(buddy, NULL, &bytes) == TERSE_OK && bytes == 0);
    CHECK(terse_sharded_onebit_adam_shrink_parts(buddy, alone, NULL, NULL, 0) == TERSE_OK);
    CHECK(terse_sharded_onebit_adam_shrunk_parts(buddy, NULL, &bytes) == TERSE_OK && bytes > 8);
    unsigned char* all = malloc(bytes);
    CHECK(all && terse_sharded_onebit_adam_shrunk_parts(buddy, all, &bytes) == TERSE_OK &&
          all[0] == 2 && all[1] == 0);
    free(all);
    CHECK(terse_sharded_onebit_adam_shard(buddy, &off, &len) == TERSE_OK && len == M - M / 2);
    CHECK(terse_sharded_onebit_adam_shrink(buddy, alone, NULL, NULL, 0) == TERSE_OK);
    CHECK(terse_sharded_onebit_adam_shard(buddy, &off, &len) == TERSE_OK && off == 0 && len == M);
    CHECK(terse_sharded_onebit_adam_steps(buddy) == 3);
    CHECK(terse_sharded_onebit_adam_step(buddy, alone, params, grads, 1e-2f) == TERSE_OK);
    terse_comm_destroy(alone);
  }
  terse_sharded_onebit_adam_destroy(buddy);
  terse_sharded_onebit_adam_destroy(bySplit);
  terse_sharded_onebit_adam_destroy(byStep);
  terse_comm_destroy(comm);
  return failures;
}

/* Removes the file store's directory (flat: the ranks' rendezvous files). */
static void removeStore(const char* dir) {
  DIR* d = opendir(dir);
  if (!d) return;
  char path[512];
  for (struct dirent* e = readdir(d); e; e = readdir(d)) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    unlink(path);
  }
  closedir(d);
  rmdir(dir);
}

int main(void) {
  /* The two-process part first: fork before this process starts a communicator's threads. */
  char store[] = "/tmp/terse_c_sharded_XXXXXX";
  if (!mkdtemp(store)) {
    perror("mkdtemp");
    return 1;
  }
  fflush(NULL);
  pid_t pids[2];
  for (int r = 0; r < 2; ++r) {
    pids[r] = fork();
    if (pids[r] == 0) {
      int bad = twoRanks(r, store);
      fflush(NULL);
      _exit(bad ? 1 : 0);
    }
  }
  for (int r = 0; r < 2; ++r) {
    int status = 0;
    CHECK(pids[r] > 0 && waitpid(pids[r], &status, 0) == pids[r] && WIFEXITED(status) &&
          WEXITSTATUS(status) == 0);
  }
  removeStore(store);

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

  /* Sizes that are neither this struct's nor the first release's (which ended before
   * local_momentum: offsetof is that size). */
  terse_sharded_onebit_adam_options_t wrong = o;
  const size_t firstRelease = offsetof(terse_sharded_onebit_adam_options_t, local_momentum);
  const size_t wrongSizes[3] = {firstRelease - 8, firstRelease + 4, sizeof o + 8};
  for (int i = 0; i < 3; ++i) {
    wrong.struct_size = wrongSizes[i];
    CHECK(terse_sharded_onebit_adam_create(N, 1, 0, &wrong, &adam) == TERSE_INVALID_ARGUMENT);
    CHECK(strstr(terse_last_error(), "struct_size") != NULL);
  }
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
  /* Re-laid out (FSDP2 at another world size): N + 1 elements, the saved ones reversed and one
   * of new padding (-1) at the end, rank 1 of 2. A map entry outside the saved tensor is refused
   * and builds nothing. The part was saved after step 4. */
  static int64_t source[N + 1];
  for (int k = 0; k < N; ++k) source[k] = N - 1 - k;
  source[N] = -1;
  terse_sharded_onebit_adam_t* relaid = NULL;
  CHECK(terse_sharded_onebit_adam_deserialize_remapped(parts, sizes, 1, 2, 1, N + 1, source,
                                                       &relaid) == TERSE_OK &&
        relaid != NULL);
  CHECK(terse_sharded_onebit_adam_shard(relaid, &off, &len) == TERSE_OK && off == 1501 &&
        len == 1501);
  CHECK(terse_sharded_onebit_adam_steps(relaid) == 4 &&
        terse_sharded_onebit_adam_frozen_at(relaid) == 2);
  terse_sharded_onebit_adam_destroy(relaid);
  source[7] = N;
  terse_sharded_onebit_adam_t* refused = NULL;
  CHECK(terse_sharded_onebit_adam_deserialize_remapped(parts, sizes, 1, 2, 1, N + 1, source,
                                                       &refused) == TERSE_INVALID_ARGUMENT &&
        refused == NULL);
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

  /* A first-release struct is accepted and leaves local momentum off, whatever lies where the
   * field would be (the library must not read past struct_size): after the freeze the state is
   * the 13 bytes per element above, not 17. */
  terse_sharded_onebit_adam_options_t first = o;
  first.struct_size = firstRelease;
  first.local_momentum = 1;
  terse_sharded_onebit_adam_t* old = NULL;
  CHECK(terse_sharded_onebit_adam_create(N, 1, 0, &first, &old) == TERSE_OK);
  for (int i = 0; i < N; ++i) params[i] = start[i];
  for (int step = 0; step < 3; ++step) {
    for (int i = 0; i < N; ++i) grads[i] = sinf(0.1f * (float)i + (float)step);
    CHECK(terse_sharded_onebit_adam_step(old, comm, params, grads, 1e-2f) == TERSE_OK);
  }
  CHECK(terse_sharded_onebit_adam_state_bytes(old) == (size_t)13 * N);
  terse_sharded_onebit_adam_destroy(old);

  /* Local momentum: 4 more bytes per element after the freeze, a version-2 checkpoint that
   * resumes bit for bit, and the reduce/update split giving step()'s parameters (at one rank the
   * shard is the whole tensor, so no all-gather is needed). */
  terse_sharded_onebit_adam_options_t lo = o;
  lo.local_momentum = 1;
  terse_sharded_onebit_adam_t *byStep = NULL, *bySplit = NULL;
  CHECK(terse_sharded_onebit_adam_create(N, 1, 0, &lo, &byStep) == TERSE_OK);
  CHECK(terse_sharded_onebit_adam_create(N, 1, 0, &lo, &bySplit) == TERSE_OK);
  static float split[N], reduced[N];
  for (int i = 0; i < N; ++i) params[i] = split[i] = start[i];
  /* update before any reduce is refused and changes nothing. */
  CHECK(terse_sharded_onebit_adam_update(bySplit, comm, split, reduced, 1e-2f) ==
        TERSE_INVALID_USAGE);
  CHECK(terse_sharded_onebit_adam_steps(bySplit) == 0);
  for (int step = 0; step < 5; ++step) {
    for (int i = 0; i < N; ++i) grads[i] = sinf(0.1f * (float)i + (float)step);
    CHECK(terse_sharded_onebit_adam_step(byStep, comm, params, grads, 1e-2f) == TERSE_OK);
    CHECK(terse_sharded_onebit_adam_reduce(bySplit, comm, grads, reduced) == TERSE_OK);
    CHECK(terse_sharded_onebit_adam_update(bySplit, comm, split, reduced, 1e-2f) == TERSE_OK);
  }
  CHECK(memcmp(params, split, sizeof params) == 0);
  CHECK(memcmp(params, start, sizeof params) != 0);
  CHECK(terse_sharded_onebit_adam_frozen_at(bySplit) == 2);
  CHECK(terse_sharded_onebit_adam_state_bytes(byStep) == (size_t)17 * N);
  /* A second reduce without its update is refused. */
  CHECK(terse_sharded_onebit_adam_reduce(bySplit, comm, grads, reduced) == TERSE_OK);
  CHECK(terse_sharded_onebit_adam_reduce(bySplit, comm, grads, reduced) == TERSE_INVALID_USAGE);
  CHECK(terse_sharded_onebit_adam_reduce(bySplit, NULL, grads, reduced) == TERSE_INVALID_ARGUMENT);
  CHECK(terse_sharded_onebit_adam_update(NULL, comm, split, reduced, 1e-2f) ==
        TERSE_INVALID_ARGUMENT);

  size = 0;
  CHECK(terse_sharded_onebit_adam_serialize(byStep, NULL, &size) == TERSE_OK && size > 12 * N);
  bytes = malloc(size);
  CHECK(terse_sharded_onebit_adam_serialize(byStep, bytes, &size) == TERSE_OK);
  uint32_t version = 0;
  memcpy(&version, bytes + 4, 4);
  CHECK(version == 2);
  parts[0] = bytes;
  sizes[0] = size;
  terse_sharded_onebit_adam_t* resumed = NULL;
  CHECK(terse_sharded_onebit_adam_deserialize(parts, sizes, 1, 1, 0, &resumed) == TERSE_OK);
  memcpy(again, params, sizeof params);
  for (int step = 5; step < 8; ++step) {
    for (int i = 0; i < N; ++i) grads[i] = cosf(0.3f * (float)i + (float)step);
    CHECK(terse_sharded_onebit_adam_step(byStep, comm, params, grads, 1e-2f) == TERSE_OK);
    CHECK(terse_sharded_onebit_adam_step(resumed, comm, again, grads, 1e-2f) == TERSE_OK);
  }
  CHECK(memcmp(params, again, sizeof params) == 0);
  bytes[size - 20] ^= 1; /* in the local momentum or the residual: the checksum catches it */
  CHECK(terse_sharded_onebit_adam_deserialize(parts, sizes, 1, 1, 0, &bad) == TERSE_CORRUPT);
  free(bytes);
  terse_sharded_onebit_adam_destroy(resumed);
  terse_sharded_onebit_adam_destroy(bySplit);
  terse_sharded_onebit_adam_destroy(byStep);

  terse_sharded_onebit_adam_destroy(half);
  terse_sharded_onebit_adam_destroy(copy);
  terse_sharded_onebit_adam_destroy(adam);
  terse_sharded_onebit_adam_destroy(NULL);
  terse_comm_destroy(comm);
  if (failures) return 1;
  printf("ShardedOneBitAdam C API: all checks passed\n");
  return 0;
}
