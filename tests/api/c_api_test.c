/* The C API from plain C, linked against libterse.so (so a missing extern "C" or an unresolved
 * C++ symbol fails the build or the load). Run alone it is a world of one; under terse-run it is
 * a real multi-rank job. Exits non-zero with a message on the first failed check. */
#include <terse/terse.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;
#define CHECK(cond, ...)                                          \
  do {                                                            \
    if (!(cond)) {                                                \
      fprintf(stderr, "c_api_test:%d: ", __LINE__);               \
      fprintf(stderr, __VA_ARGS__);                               \
      fprintf(stderr, " [last error: %s]\n", terse_last_error()); \
      failures++;                                                 \
    }                                                             \
  } while (0)

int main(void) {
  terse_comm_t* comm = NULL;
  terse_status_t s = terse_comm_create(&comm);
  CHECK(s == TERSE_OK, "terse_comm_create: %s", terse_status_name(s));
  if (s != TERSE_OK) return 1;
  const int n = terse_comm_size(comm), rank = terse_comm_rank(comm);
  CHECK(n >= 1 && rank >= 0 && rank < n, "rank %d of %d", rank, n);
  {
    /* The two levels: terse-run --nodes sets TERSE_NODE with the launcher's local rank and size
     * beside it; without it every rank is on this host. */
    const int local = terse_comm_local_rank(comm), local_size = terse_comm_local_size(comm);
    const int node = terse_comm_node(comm), nodes = terse_comm_node_count(comm);
    const char* env_local = getenv("TERSE_LOCAL_RANK");
    const char* env_size = getenv("TERSE_LOCAL_SIZE");
    if (getenv("TERSE_NODE") != NULL) {
      CHECK(env_local && local == atoi(env_local), "local rank %d, launcher %s", local, env_local);
      CHECK(env_size && local_size == atoi(env_size), "local size %d, launcher %s", local_size,
            env_size);
      CHECK(nodes > 1 || n == 1 || local_size == n, "%d nodes", nodes);
    } else {
      CHECK(local == rank && local_size == n && node == 0 && nodes == 1,
            "one host: local %d of %d, node %d of %d", local, local_size, node, nodes);
    }
    CHECK(node >= 0 && node < nodes && local >= 0 && local < local_size, "node %d of %d", node,
          nodes);
    CHECK(terse_comm_local_rank(NULL) == -1 && terse_comm_node_count(NULL) == -1, "NULL comm");
  }

  enum { kCount = 1001 };
  float* in = malloc(kCount * sizeof(float));
  float* out = malloc(kCount * sizeof(float));
  for (int i = 0; i < kCount; ++i) in[i] = (float)(rank + 1) * (float)(i % 13 - 6) * 0.25f;
  const char* codecs[] = {"none", "fp16", "bf16", "int8", "onebit", "topk:ratio=0.5"};
  for (size_t c = 0; c < sizeof codecs / sizeof codecs[0]; ++c) {
    terse_feedback_t* fb = NULL;
    s = terse_feedback_create(codecs[c], kCount, &fb);
    CHECK(s == TERSE_OK, "feedback for %s", codecs[c]);
    s = terse_allreduce(comm, in, out, kCount, TERSE_FLOAT32, TERSE_SUM, codecs[c], fb);
    CHECK(s == TERSE_OK, "allreduce %s: %s", codecs[c], terse_status_name(s));
    if (c == 0) {
      /* sum over ranks of (r+1) = n(n+1)/2; values are exact in float32 */
      for (int i = 0; i < kCount; ++i) {
        float want = (float)(n * (n + 1) / 2) * (float)(i % 13 - 6) * 0.25f;
        CHECK(out[i] == want, "none: element %d is %g, expected %g", i, out[i], want);
        if (out[i] != want) break;
      }
    }
    size_t need = 0;
    s = terse_feedback_serialize(fb, NULL, &need);
    CHECK(s == TERSE_OK && need > 0, "serialize size query");
    void* buf = malloc(need);
    size_t size = need;
    s = terse_feedback_serialize(fb, buf, &size);
    CHECK(s == TERSE_OK && size == need, "serialize");
    terse_feedback_t* back = NULL;
    s = terse_feedback_deserialize(buf, size, &back);
    CHECK(s == TERSE_OK, "deserialize");
    {
      char made[64], loaded[64];
      size_t made_size = sizeof made, loaded_size = sizeof loaded, made_count = 0, loaded_count = 0;
      CHECK(terse_feedback_info(fb, made, &made_size, &made_count) == TERSE_OK &&
                terse_feedback_info(back, loaded, &loaded_size, &loaded_count) == TERSE_OK,
            "feedback info");
      CHECK(made_count == kCount && loaded_count == kCount && strcmp(made, loaded) == 0 &&
                strncmp(made, codecs[c], 4) == 0,
            "feedback info: %s/%zu and %s/%zu for %s", made, made_count, loaded, loaded_count,
            codecs[c]);
    }
    {
      /* The worker residual in place: what the loaded state holds equals the saved one's, and
       * a value written there is what the next checkpoint carries. */
      float *mine = NULL, *theirs = NULL;
      CHECK(terse_feedback_worker(fb, &mine) == TERSE_OK &&
                terse_feedback_worker(back, &theirs) == TERSE_OK && mine && theirs,
            "feedback worker");
      CHECK(memcmp(mine, theirs, kCount * sizeof(float)) == 0, "loaded worker residual differs");
      theirs[3] = 42.5f;
      size_t again = 0;
      terse_feedback_serialize(back, NULL, &again);
      void* copy = malloc(again);
      CHECK(copy && terse_feedback_serialize(back, copy, &again) == TERSE_OK, "serialize again");
      terse_feedback_t* third = NULL;
      float* written = NULL;
      CHECK(terse_feedback_deserialize(copy, again, &third) == TERSE_OK &&
                terse_feedback_worker(third, &written) == TERSE_OK && written[3] == 42.5f,
            "a value written through terse_feedback_worker did not reach the checkpoint");
      CHECK(terse_feedback_worker(NULL, &written) == TERSE_INVALID_ARGUMENT &&
                terse_feedback_worker(third, NULL) == TERSE_INVALID_ARGUMENT,
            "terse_feedback_worker took a null argument");
      terse_feedback_destroy(third);
      free(copy);
    }
    s = terse_feedback_deserialize(buf, size / 2, &back);
    CHECK(s == TERSE_CORRUPT || s == TERSE_INVALID_ARGUMENT, "truncated checkpoint accepted");
    free(buf);
    terse_feedback_destroy(back);
    terse_feedback_destroy(fb);
  }

  /* async: two in flight, completed in order */
  terse_work_t *w1 = NULL, *w2 = NULL;
  s = terse_allreduce_async(comm, in, out, kCount, TERSE_FLOAT32, TERSE_AVG, "bf16", NULL, &w1);
  CHECK(s == TERSE_OK, "async 1");
  float* out2 = malloc(kCount * sizeof(float));
  s = terse_allreduce_async(comm, in, out2, kCount, TERSE_FLOAT32, TERSE_SUM, NULL, NULL, &w2);
  CHECK(s == TERSE_OK, "async 2");
  CHECK(terse_work_wait(w2) == TERSE_OK, "wait 2");
  CHECK(terse_work_test(w1) == TERSE_OK, "test 1 after 2 finished");
  terse_work_free(w1);
  terse_work_free(w2);

  /* errors: clear codes and messages, nothing crashes */
  s = terse_allreduce(comm, in, out, kCount, TERSE_FLOAT32, TERSE_SUM, "zstd", NULL);
  CHECK(s == TERSE_INVALID_ARGUMENT && strstr(terse_last_error(), "zstd") != NULL,
        "unknown codec: %s", terse_status_name(s));
  s = terse_allreduce(comm, NULL, out, kCount, TERSE_FLOAT32, TERSE_SUM, NULL, NULL);
  CHECK(s == TERSE_INVALID_ARGUMENT, "null send buffer: %s", terse_status_name(s));
  terse_feedback_t* wrong = NULL;
  CHECK(terse_feedback_create("onebit", 7, &wrong) == TERSE_OK, "feedback 7");
  s = terse_allreduce(comm, in, out, kCount, TERSE_FLOAT32, TERSE_SUM, "onebit", wrong);
  CHECK(s == TERSE_INVALID_ARGUMENT, "feedback of the wrong size: %s", terse_status_name(s));
  terse_feedback_destroy(wrong);
  CHECK(terse_comm_barrier(comm) == TERSE_OK, "barrier");
  CHECK(strlen(terse_version()) > 0, "version");

  /* A split: even and odd ranks, each summing only its members. */
  {
    terse_comm_t* half = NULL;
    CHECK(terse_comm_split(comm, rank % 2, rank, &half) == TERSE_OK && half != NULL, "split");
    if (half) {
      const int hn = terse_comm_size(half);
      CHECK(hn == (n - rank % 2 + 1) / 2, "split size %d of %d ranks", hn, n);
      float one = (float)(rank + 1), sum = 0.0f, want = 0.0f;
      CHECK(
          terse_allreduce(half, &one, &sum, 1, TERSE_FLOAT32, TERSE_SUM, "none", NULL) == TERSE_OK,
          "allreduce on the split");
      for (int r = rank % 2; r < n; r += 2) want += (float)(r + 1);
      CHECK(sum == want, "split sum %g, expected %g", sum, want);
      terse_comm_destroy(half);
    }
    terse_comm_t* none = (terse_comm_t*)1;
    CHECK(terse_comm_split(comm, -1, 0, &none) == TERSE_OK && none == NULL, "negative color");
  }

  /* What a codec spec means, without a communicator. */
  {
    char spec[64];
    size_t size = 0;
    int wants = -1;
    CHECK(terse_codec_info("topk", NULL, &size, &wants) == TERSE_OK && size == 16 && wants == 1,
          "topk info: size %zu wants %d", size, wants);
    size = sizeof spec;
    CHECK(terse_codec_info("topk", spec, &size, NULL) == TERSE_OK &&
              strcmp(spec, "topk:ratio=0.01") == 0,
          "topk canonical: %s", spec);
    size = 4;
    CHECK(terse_codec_info("topk", spec, &size, NULL) == TERSE_INVALID_ARGUMENT && size == 16,
          "a short buffer");
    size = sizeof spec;
    CHECK(terse_codec_info("auto", spec, &size, &wants) == TERSE_OK &&
              strcmp(spec, "auto:max=int8") == 0 && wants == 0,
          "auto: %s wants %d", spec, wants);
    CHECK(terse_codec_info("auto:max=onebit", NULL, &size, &wants) == TERSE_OK && wants == 1,
          "auto:max=onebit wants feedback");
    CHECK(terse_codec_info("bf16", NULL, &size, &wants) == TERSE_OK && wants == 0, "bf16");
    CHECK(terse_codec_info("int8:block=3", NULL, &size, NULL) == TERSE_INVALID_ARGUMENT &&
              strstr(terse_last_error(), "block") != NULL,
          "a bad spec names what is wrong");
  }

  /* Async reduce-scatter and allgather compose to the allreduce. */
  {
    size_t off = 0, len = 0;
    terse_comm_part(comm, kCount, &off, &len);
    float* part = malloc((len ? len : 1) * sizeof(float));
    float* all = malloc(kCount * sizeof(float));
    terse_work_t *rs = NULL, *ag = NULL;
    CHECK(terse_reduce_scatter_async(comm, in, part, kCount, TERSE_FLOAT32, TERSE_SUM, "none", NULL,
                                     &rs) == TERSE_OK,
          "reduce_scatter_async");
    CHECK(terse_work_wait(rs) == TERSE_OK, "reduce_scatter wait");
    terse_work_free(rs);
    CHECK(terse_allgather_async(comm, part, all, kCount, TERSE_FLOAT32, "none", NULL, &ag) ==
              TERSE_OK,
          "allgather_async");
    CHECK(terse_work_wait(ag) == TERSE_OK, "allgather wait");
    terse_work_free(ag);
    for (int i = 0; i < kCount; ++i) {
      float want = (float)(n * (n + 1) / 2) * (float)(i % 13 - 6) * 0.25f;
      CHECK(all[i] == want, "reduce-scatter + allgather: element %d is %g, expected %g", i, all[i],
            want);
      if (all[i] != want) break;
    }
    free(part);
    free(all);
  }

  /* Statistics: every allreduce above is counted, the refused ones as failures. */
  terse_stats_t st;
  memset(&st, 0xff, sizeof st);
  CHECK(terse_comm_stats(comm, &st) == TERSE_OK, "stats");
  CHECK(st.allreduce.calls >= 6 && st.allreduce.failures == 3,
        "allreduce calls %llu, failures %llu", (unsigned long long)st.allreduce.calls,
        (unsigned long long)st.allreduce.failures);
  CHECK(st.barriers == 1, "barriers %llu", (unsigned long long)st.barriers);
  CHECK(n == 1 || st.allreduce.wire_bytes > 0, "wire bytes with %d ranks", n);
  CHECK(st.allreduce.raw_bytes >= 6ull * kCount * 4, "raw bytes %llu",
        (unsigned long long)st.allreduce.raw_bytes);
  CHECK(terse_comm_stats(comm, NULL) == TERSE_INVALID_ARGUMENT, "stats into NULL");

  /* auto's picks: none yet; after two auto calls, entries whose calls add up to 2, each a codec
   * auto:max=fp16 allows (fp16 and bf16 are one level: docs/codecs.md). */
  size_t picks = 99;
  CHECK(terse_comm_stats_auto_pick_count(comm, &picks) == TERSE_OK && picks == 0,
        "picks before any auto call: %zu", picks);
  for (int i = 0; i < 2; ++i)
    CHECK(terse_allreduce(comm, in, out, kCount, TERSE_FLOAT32, TERSE_SUM, "auto:max=fp16", NULL) ==
              TERSE_OK,
          "auto allreduce");
  CHECK(terse_comm_stats_auto_pick_count(comm, &picks) == TERSE_OK && picks >= 1 && picks <= 2,
        "%zu picks after two auto calls", picks);
  uint64_t picked = 0;
  for (size_t i = 0; i < picks; ++i) {
    size_t size = 0;
    uint64_t calls = 0;
    char spec[64] = "";
    CHECK(terse_comm_stats_auto_pick(comm, i, NULL, &size, NULL) == TERSE_OK && size > 1 &&
              size <= sizeof spec,
          "pick %zu: spec size %zu", i, size);
    CHECK(terse_comm_stats_auto_pick(comm, i, spec, &size, &calls) == TERSE_OK, "pick %zu", i);
    CHECK(strcmp(spec, "none") == 0 || strcmp(spec, "fp16") == 0 || strcmp(spec, "bf16") == 0,
          "auto:max=fp16 picked %s", spec);
    picked += calls;
  }
  CHECK(picked == 2, "%llu picked calls for 2 auto calls", (unsigned long long)picked);
  {
    size_t size = 64;
    char spec[64];
    CHECK(terse_comm_stats_auto_pick(comm, picks, spec, &size, NULL) == TERSE_INVALID_ARGUMENT,
          "a pick past the last");
  }

  terse_comm_destroy(comm);
  free(in);
  free(out);
  free(out2);
  if (failures == 0) printf("c_api_test: rank %d of %d: all checks passed\n", rank, n);
  return failures ? 1 : 0;
}
