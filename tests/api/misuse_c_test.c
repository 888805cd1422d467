/* The public API abused the way a careless user would (issue #22), from plain C against the
 * installed header only. Run under terse-run with 2 or more ranks; the last rank is the one that
 * misbehaves. The contract checked (the misuse table of docs/reliability.md; drafted in
 * docs/misuse-table-draft.md):
 *  - a rank that passes an invalid argument gets TERSE_INVALID_ARGUMENT, and every other rank
 *    gets TERSE_INVALID_USAGE for the SAME call, in well under a second (never the timeout);
 *  - ranks that make different valid calls all get TERSE_INVALID_USAGE, as quickly;
 *  - after either, the communicator still works: the next allreduce is exact on every rank;
 *  - an abort on one rank reaches the others at once, naming that rank;
 *  - lifecycle abuse and extreme values give errors or defined results, never a crash.
 * Each case is a function; the first violated check prints the case and exits non-zero. All
 * cases share one communicator, in the order of the table at the end (abort last: it leaves the
 * communicator dead). With case names as arguments only those run, which is how one case is
 * replayed; `--list` prints the names.
 *
 * A second mode, `misuse_c_test create`, creates a communicator from the environment and reports
 * "create: <status name>: <message>" on stdout, then, when that worked, runs a barrier and an
 * allreduce and reports "use: ...". Exit code: 0 created and usable, 2 create failed with
 * TERSE_INVALID_ARGUMENT, 1 create failed otherwise, 3 created but not usable.
 * misuse_settings_test.sh drives it with malformed settings and duplicate ranks. */
#define _POSIX_C_SOURCE 200809L
#include <terse/terse.h>

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Longer than any correct answer needs, far shorter than TERSE_TIMEOUT_MS (15 s in ctest). */
#define PEER_LIMIT_S 1.0
/* An abort reaches the peers when UCX reports the aborting rank's closed endpoints: 0.23-0.68 s
 * measured over shared memory and TCP on an idle 2-core machine (docs/reliability.md), more
 * while ctest runs two jobs at once. The limit leaves that room and still fails long before
 * the 15 s timeout that a peer used to wait out. */
#define ABORT_LIMIT_S 3.0
enum { kCount = 1001 };

static terse_comm_t* comm;
static int rank, world;
static const char* current_case = "(setup)";
static float* in;  /* rank-dependent input of kCount elements */
static float* out; /* result buffer */

static void fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "misuse_c_test: FAILED case %s on rank %d of %d: ", current_case, rank, world);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, " [last error: %s]\n", terse_last_error());
  va_end(ap);
  fflush(stdout);
  fflush(stderr);
  /* No terse_comm_destroy: after a broken contract the peers may be wedged; terse-run stops them
   * once this rank exits non-zero. */
  _exit(1);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int last_rank(void) { return rank == world - 1; }

static void fill_input(void) {
  /* Small integers times 0.25: every partial sum is exact in float32 whatever the order. */
  for (int i = 0; i < kCount; ++i) in[i] = (float)(rank + 1) * (float)(i % 13 - 6) * 0.25f;
}

static float expected_sum(int i) {
  return (float)(world * (world + 1) / 2) * (float)(i % 13 - 6) * 0.25f;
}

/* The communicator still works: an uncompressed SUM is exact on every rank. */
static void check_usable(const char* after) {
  fill_input();
  memset(out, 0xff, kCount * sizeof(float));
  terse_status_t s = terse_allreduce(comm, in, out, kCount, TERSE_FLOAT32, TERSE_SUM, "none", NULL);
  if (s != TERSE_OK)
    fail("the allreduce after %s returned %s (the communicator must stay usable)", after,
         terse_status_name(s));
  for (int i = 0; i < kCount; ++i)
    if (out[i] != expected_sum(i))
      fail("the allreduce after %s: element %d is %g, expected %g (paired with another call?)",
           after, i, out[i], expected_sum(i));
}

static void report(const char* what, terse_status_t s, double seconds) {
  printf("misuse_c_test: case %s: rank %d %s: %s in %.3f s\n", current_case, rank, what,
         terse_status_name(s), seconds);
  fflush(stdout);
}

/* The outcome of one call where the last rank misbehaved and the others did not. */
static void expect_split(terse_status_t s, double seconds, terse_status_t last_wants,
                         terse_status_t others_want) {
  const terse_status_t want = last_rank() ? last_wants : others_want;
  report(last_rank() ? "(misusing rank) got" : "(peer) got", s, seconds);
  if (s != want) fail("got %s, expected %s", terse_status_name(s), terse_status_name(want));
  if (!last_rank() && seconds >= PEER_LIMIT_S)
    fail("took %.3f s to learn of rank %d's misuse (limit %.1f s)", seconds, world - 1,
         PEER_LIMIT_S);
  if (!last_rank()) { /* a peer's message says which rank to look at */
    char name[32];
    snprintf(name, sizeof name, "rank %d", world - 1);
    if (strstr(terse_last_error(), name) == NULL)
      fail("the message does not name %s, the rank that misused the call", name);
  }
}

/* Every rank must get TERSE_INVALID_USAGE quickly (disagreement among valid calls). */
static void expect_all_usage(terse_status_t s, double seconds) {
  report("got", s, seconds);
  if (s != TERSE_INVALID_USAGE)
    fail("got %s, expected %s", terse_status_name(s), terse_status_name(TERSE_INVALID_USAGE));
  if (seconds >= PEER_LIMIT_S)
    fail("took %.3f s to learn of the disagreement (limit %.1f s)", seconds, PEER_LIMIT_S);
}

static void expect_message_has(const char* needle) {
  if (strstr(terse_last_error(), needle) == NULL)
    fail("the message does not contain \"%s\"", needle);
}

/* ---- argument disagreement: the last rank's argument is invalid ------------------------------ */

/* One allreduce where the last rank uses `bad_codec` and the others "none". "none" on purpose: it
 * is what check_usable calls next, so a peer paired with the misusing rank's NEXT call (the
 * rejecting rank never joined this one) returns ok with a wrong sum instead of an error. */
static void codec_case(const char* bad_codec) {
  fill_input();
  const double t0 = now_s();
  terse_status_t s = terse_allreduce(comm, in, out, kCount, TERSE_FLOAT32, TERSE_SUM,
                                     last_rank() ? bad_codec : "none", NULL);
  const double dt = now_s() - t0;
  expect_split(s, dt, TERSE_INVALID_ARGUMENT, TERSE_INVALID_USAGE);
  if (last_rank()) {
    /* The message may quote the spec, but escaped: raw control bytes would garble a log. */
    for (const char* p = terse_last_error(); *p; ++p)
      if ((unsigned char)*p < 0x20 || *p == 0x7f) fail("the message holds control byte 0x%02x", *p);
  }
  check_usable(current_case);
}

static void case_codec_bogus(void) { codec_case("bogus"); }
static void case_codec_int8_block3(void) { codec_case("int8:block=3"); }
static void case_codec_empty(void) { codec_case(""); }
static void case_codec_auto_max_bogus(void) { codec_case("auto:max=bogus"); }
static void case_codec_control_char(void) { codec_case("int8\x1b[31m\n:block=256"); }

/* One allreduce where only the last rank's call differs by the given arguments. */
static void arg_case(const void* send, void* recv, size_t count, terse_dtype_t dtype,
                     terse_redop_t op, const char* codec, terse_feedback_t* fb) {
  fill_input();
  const double t0 = now_s();
  terse_status_t s =
      last_rank() ? terse_allreduce(comm, send, recv, count, dtype, op, codec, fb)
                  : terse_allreduce(comm, in, out, kCount, TERSE_FLOAT32, TERSE_SUM, codec, NULL);
  const double dt = now_s() - t0;
  expect_split(s, dt, TERSE_INVALID_ARGUMENT, TERSE_INVALID_USAGE);
  check_usable(current_case);
}

static void case_dtype_256(void) {
  arg_case(in, out, kCount, (terse_dtype_t)256, TERSE_SUM, "none", NULL);
}
static void case_op_256(void) {
  arg_case(in, out, kCount, TERSE_FLOAT32, (terse_redop_t)256, "none", NULL);
}
static void case_null_send(void) {
  arg_case(NULL, out, kCount, TERSE_FLOAT32, TERSE_SUM, "none", NULL);
}
/* count x 4 bytes wraps to 64 bytes: the call must not reduce 16 elements and say ok. */
static void case_count_overflow_f32(void) {
  arg_case(in, out, (size_t)0x4000000000000010ull, TERSE_FLOAT32, TERSE_SUM, "none", NULL);
}
/* count x 2 bytes wraps to 32 bytes (this one used to corrupt the heap). */
static void case_count_overflow_f16(void) {
  arg_case(in, out, (size_t)0x8000000000000010ull, TERSE_FLOAT16, TERSE_SUM, "none", NULL);
}
static void case_count_size_max(void) {
  arg_case(in, out, SIZE_MAX, TERSE_FLOAT32, TERSE_SUM, "none", NULL);
}
static void case_count_size_max_int8(void) {
  arg_case(in, out, SIZE_MAX / 4, TERSE_FLOAT32, TERSE_SUM, "int8", NULL);
}
static void case_count_size_max_topk(void) {
  arg_case(in, out, SIZE_MAX / 4, TERSE_FLOAT32, TERSE_SUM, "topk", NULL);
}

/* Every rank passes the same impossible count: each gets TERSE_INVALID_ARGUMENT, checked before
 * anything is sized or allocated (these once reduced 16 elements and said ok, corrupted the
 * heap, or threw std::length_error / std::bad_alloc). */
static void case_count_overflow_all(void) {
  static const struct {
    size_t count;
    terse_dtype_t dtype;
    const char* codec;
  } calls[] = {
      {(size_t)0x4000000000000010ull, TERSE_FLOAT32, "none"},
      {(size_t)0x8000000000000010ull, TERSE_FLOAT16, "none"},
      {SIZE_MAX, TERSE_FLOAT32, "none"},
      {SIZE_MAX / 4, TERSE_FLOAT32, "int8"},
      {SIZE_MAX / 4, TERSE_FLOAT32, "topk"},
  };
  for (size_t k = 0; k < sizeof calls / sizeof calls[0]; ++k) {
    fill_input();
    const double t0 = now_s();
    terse_status_t s = terse_allreduce(comm, in, out, calls[k].count, calls[k].dtype, TERSE_SUM,
                                       calls[k].codec, NULL);
    const double dt = now_s() - t0;
    printf("misuse_c_test: case %s: rank %d: count %zu (%s, %s) got %s in %.3f s\n", current_case,
           rank, calls[k].count, calls[k].dtype == TERSE_FLOAT16 ? "float16" : "float32",
           calls[k].codec, terse_status_name(s), dt);
    fflush(stdout);
    if (s != TERSE_INVALID_ARGUMENT)
      fail("count %zu (%s) gave %s, expected invalid argument", calls[k].count, calls[k].codec,
           terse_status_name(s));
    if (dt >= PEER_LIMIT_S) fail("count %zu took %.3f s", calls[k].count, dt);
    check_usable(current_case);
  }
}

/* recv = send + 1 element: an overlap that is not exact in-place. The buffer has room for it. */
static void overlap_case(const char* codec) {
  float* buf = calloc(kCount + 1, sizeof(float));
  if (!buf) fail("out of memory");
  memcpy(buf, in, kCount * sizeof(float));
  arg_case(buf, buf + 1, kCount, TERSE_FLOAT32, TERSE_SUM, codec, NULL);
  free(buf);

  /* exact in-place (send == recv) stays valid for the same codec on every rank */
  fill_input();
  memcpy(out, in, kCount * sizeof(float));
  terse_status_t s = terse_allreduce(comm, out, out, kCount, TERSE_FLOAT32, TERSE_SUM, codec, NULL);
  if (s != TERSE_OK) fail("in-place (send == recv) %s: %s", codec, terse_status_name(s));
  if (strcmp(codec, "none") == 0)
    for (int i = 0; i < kCount; ++i)
      if (out[i] != expected_sum(i)) fail("in-place none: element %d is %g", i, out[i]);
  for (int i = 0; i < kCount; ++i)
    if (!isfinite(out[i])) fail("in-place %s: element %d is %g", codec, i, out[i]);
}
static void case_overlap_none(void) { overlap_case("none"); }
static void case_overlap_fp16(void) { overlap_case("fp16"); }
static void case_overlap_bf16(void) { overlap_case("bf16"); }
static void case_overlap_int8(void) { overlap_case("int8"); }
static void case_overlap_topk(void) { overlap_case("topk:ratio=0.5"); }

/* An error-feedback object made for another element count, on the last rank only. */
static void case_feedback_wrong_count(void) {
  terse_feedback_t* wrong = NULL;
  if (terse_feedback_create("onebit", 7, &wrong) != TERSE_OK) fail("feedback_create(onebit, 7)");
  fill_input();
  const double t0 = now_s();
  terse_status_t s = terse_allreduce(comm, in, out, kCount, TERSE_FLOAT32, TERSE_SUM, "onebit",
                                     last_rank() ? wrong : NULL);
  const double dt = now_s() - t0;
  terse_feedback_destroy(wrong);
  expect_split(s, dt, TERSE_INVALID_ARGUMENT, TERSE_INVALID_USAGE);
  check_usable(current_case);
}

/* The async form: the last rank passes no place for the handle. */
static void case_async_null_work(void) {
  fill_input();
  terse_work_t* work = NULL;
  const double t0 = now_s();
  terse_status_t s = terse_allreduce_async(comm, in, out, kCount, TERSE_FLOAT32, TERSE_SUM, "none",
                                           NULL, last_rank() ? NULL : &work);
  if (s == TERSE_OK && work) s = terse_work_wait(work);
  const double dt = now_s() - t0;
  terse_work_free(work);
  expect_split(s, dt, TERSE_INVALID_ARGUMENT, TERSE_INVALID_USAGE);
  check_usable(current_case);
}

static terse_status_t timed_allreduce(size_t count, terse_dtype_t dtype, terse_redop_t op,
                                      const char* codec, double* seconds);

/* terse_comm_split with a NULL out on the last rank: its refusal stands in for split's exchange,
 * so the others' split fails at once instead of pairing with the last rank's next call. */
static void case_split_null_out(void) {
  terse_comm_t* child = NULL;
  const double t0 = now_s();
  terse_status_t s = terse_comm_split(comm, 0, rank, last_rank() ? NULL : &child);
  const double dt = now_s() - t0;
  terse_comm_destroy(child);
  expect_split(s, dt, TERSE_INVALID_ARGUMENT, TERSE_INVALID_USAGE);
  check_usable(current_case);
}

/* A binding that refuses its caller's arguments itself (the Python package: a non-contiguous
 * tensor) calls terse_comm_reject in the call's place; the others' allreduce fails at once. */
static void case_binding_reject(void) {
  double dt;
  terse_status_t s;
  if (last_rank()) {
    const double t0 = now_s();
    s = terse_comm_reject(comm, "the tensor is not contiguous\x1b[31m");
    dt = now_s() - t0;
    if (strstr(terse_last_error(), "not contiguous") == NULL || strchr(terse_last_error(), 0x1b))
      fail("terse_comm_reject's message is \"%s\": not the reason, or not escaped",
           terse_last_error());
  } else {
    fill_input();
    s = timed_allreduce(kCount, TERSE_FLOAT32, TERSE_SUM, "none", &dt);
  }
  expect_split(s, dt, TERSE_INVALID_ARGUMENT, TERSE_INVALID_USAGE);
  check_usable(current_case);
}

/* terse_*_ex: the options struct is read on each rank; one the library cannot read, or an unknown
 * algorithm, on the last rank fails the same call on every rank. Valid calls (blocking and async,
 * algorithm "flat") give the exact sum, and "twolevel" on one node fails on every rank. */
static void ex_case(int null_options, size_t struct_size, const char* algorithm) {
  terse_call_options_t o;
  terse_call_options_default(&o);
  if (last_rank()) {
    o.struct_size = struct_size;
    o.algorithm = algorithm;
  }
  fill_input();
  const double t0 = now_s();
  terse_status_t s = terse_allreduce_ex(comm, in, out, kCount, TERSE_FLOAT32, TERSE_SUM,
                                        null_options && last_rank() ? NULL : &o, NULL);
  const double dt = now_s() - t0;
  expect_split(s, dt, TERSE_INVALID_ARGUMENT, TERSE_INVALID_USAGE);
  check_usable(current_case);
}
static void case_ex_null_options(void) { ex_case(1, sizeof(terse_call_options_t), NULL); }
static void case_ex_struct_size(void) { ex_case(0, sizeof(terse_call_options_t) - 1, NULL); }
static void case_ex_algorithm_bogus(void) { ex_case(0, sizeof(terse_call_options_t), "ring"); }

static void case_ex_forms_run(void) {
  terse_call_options_t o;
  terse_call_options_default(&o);
  if (o.struct_size != sizeof o || o.codec || o.feedback || o.algorithm)
    fail("terse_call_options_default left struct_size %zu and non-NULL fields", o.struct_size);
  o.algorithm = "flat";
  fill_input();
  memset(out, 0xff, kCount * sizeof(float));
  terse_status_t s = terse_allreduce_ex(comm, in, out, kCount, TERSE_FLOAT32, TERSE_SUM, &o, NULL);
  if (s != TERSE_OK) fail("allreduce_ex (flat) returned %s", terse_status_name(s));
  for (int i = 0; i < kCount; ++i)
    if (out[i] != expected_sum(i)) fail("allreduce_ex: element %d is %g", i, out[i]);
  size_t off = 0, len = 0;
  terse_comm_part(comm, kCount, &off, &len);
  terse_work_t* work = NULL;
  memset(out, 0xff, kCount * sizeof(float));
  s = terse_reduce_scatter_ex(comm, in, out, kCount, TERSE_FLOAT32, TERSE_SUM, &o, &work);
  if (s == TERSE_OK) s = terse_work_wait(work);
  terse_work_free(work);
  if (s != TERSE_OK) fail("reduce_scatter_ex (async) returned %s", terse_status_name(s));
  for (size_t i = 0; i < len; ++i)
    if (out[i] != expected_sum((int)(off + i)))
      fail("reduce_scatter_ex: element %zu is %g", off + i, out[i]);
  float* gathered = (float*)malloc(kCount * sizeof(float));
  if (!gathered) fail("out of memory");
  s = terse_allgather_ex(comm, out, gathered, kCount, TERSE_FLOAT32, &o, NULL);
  if (s != TERSE_OK) fail("allgather_ex returned %s", terse_status_name(s));
  for (int i = 0; i < kCount; ++i)
    if (gathered[i] != expected_sum(i)) fail("allgather_ex: element %d is %g", i, gathered[i]);
  free(gathered);
  if (world > 1 && getenv("TERSE_NODE") == NULL) {
    o.algorithm = "twolevel"; /* one node: two-level cannot run, and every rank is told */
    const double t0 = now_s();
    s = terse_allreduce_ex(comm, in, out, kCount, TERSE_FLOAT32, TERSE_SUM, &o, NULL);
    const double dt = now_s() - t0;
    report("(twolevel on one node) got", s, dt);
    if (s == TERSE_OK) fail("twolevel on one node succeeded");
    expect_message_has("two-level");
  }
  check_usable(current_case);
}

/* The other collectives join the same agreement: a bad codec on the last rank's reduce-scatter, a
 * NULL receive buffer on the last rank's allgather. */
static void case_reduce_scatter_bad_codec(void) {
  size_t off = 0, len = 0;
  terse_comm_part(comm, kCount, &off, &len);
  fill_input();
  const double t0 = now_s();
  terse_status_t s = terse_reduce_scatter(comm, in, out, kCount, TERSE_FLOAT32, TERSE_SUM,
                                          last_rank() ? "bogus" : "none", NULL);
  const double dt = now_s() - t0;
  expect_split(s, dt, TERSE_INVALID_ARGUMENT, TERSE_INVALID_USAGE);
  check_usable(current_case);
}
static void case_allgather_null_recv(void) {
  size_t off = 0, len = 0;
  terse_comm_part(comm, kCount, &off, &len);
  fill_input();
  const double t0 = now_s();
  terse_status_t s = terse_allgather(comm, in + off, last_rank() ? NULL : out, kCount,
                                     TERSE_FLOAT32, "none", NULL);
  const double dt = now_s() - t0;
  expect_split(s, dt, TERSE_INVALID_ARGUMENT, TERSE_INVALID_USAGE);
  check_usable(current_case);
}

/* ---- disagreement among valid calls ---------------------------------------------------------- */

static terse_status_t timed_allreduce(size_t count, terse_dtype_t dtype, terse_redop_t op,
                                      const char* codec, double* seconds) {
  fill_input(); /* float32 input; for 16-bit dtypes the buffer is just bigger than needed */
  const double t0 = now_s();
  terse_status_t s = terse_allreduce(comm, in, out, count, dtype, op, codec, NULL);
  *seconds = now_s() - t0;
  return s;
}

static void case_disagree_count(void) {
  double dt;
  terse_status_t s =
      timed_allreduce(last_rank() ? kCount - 1 : kCount, TERSE_FLOAT32, TERSE_SUM, "none", &dt);
  expect_all_usage(s, dt);
  check_usable(current_case);
}
static void case_disagree_dtype(void) {
  double dt;
  terse_status_t s =
      timed_allreduce(kCount, last_rank() ? TERSE_BFLOAT16 : TERSE_FLOAT32, TERSE_SUM, "none", &dt);
  expect_all_usage(s, dt);
  check_usable(current_case);
}
static void case_disagree_op(void) {
  double dt;
  terse_status_t s =
      timed_allreduce(kCount, TERSE_FLOAT32, last_rank() ? TERSE_AVG : TERSE_SUM, "none", &dt);
  expect_all_usage(s, dt);
  check_usable(current_case);
}
/* Both specs in words on every rank, so whoever reads any one log sees what differed. */
static void case_disagree_codec(void) {
  double dt;
  terse_status_t s =
      timed_allreduce(kCount, TERSE_FLOAT32, TERSE_SUM, last_rank() ? "fp16" : "int8", &dt);
  expect_all_usage(s, dt);
  expect_message_has("int8");
  expect_message_has("fp16");
  check_usable(current_case);
}
/* Same codec, different parameters: the message must show the specs, not only their hashes. */
static void case_disagree_codec_params(void) {
  double dt;
  terse_status_t s = timed_allreduce(kCount, TERSE_FLOAT32, TERSE_SUM,
                                     last_rank() ? "int8:block=128" : "int8:block=256", &dt);
  expect_all_usage(s, dt);
  expect_message_has("block=128");
  expect_message_has("block=256");
  check_usable(current_case);
}
/* "auto" calibrates with collectives of its own; the error must still describe the user's call. */
static void case_disagree_auto(void) {
  double dt;
  terse_status_t s =
      timed_allreduce(kCount, TERSE_FLOAT32, TERSE_SUM, last_rank() ? "int8" : "auto", &dt);
  expect_all_usage(s, dt);
  expect_message_has("auto");
  check_usable(current_case);
}
static void case_disagree_barrier(void) {
  double dt;
  terse_status_t s;
  if (last_rank()) {
    const double t0 = now_s();
    s = terse_comm_barrier(comm);
    dt = now_s() - t0;
  } else {
    s = timed_allreduce(kCount, TERSE_FLOAT32, TERSE_SUM, "none", &dt);
  }
  expect_all_usage(s, dt);
  check_usable(current_case);
}

/* ---- lifecycle ------------------------------------------------------------------------------- */

/* Two more communicators created back to back (no collective between, the first not destroyed),
 * used interleaved. */
static void case_two_comms(void) {
  terse_comm_t *a = NULL, *b = NULL;
  terse_status_t s = terse_comm_create(&a);
  if (s != TERSE_OK) fail("first terse_comm_create: %s", terse_status_name(s));
  s = terse_comm_create(&b);
  if (s != TERSE_OK) fail("second terse_comm_create (first still open): %s", terse_status_name(s));
  if (terse_comm_rank(a) != rank || terse_comm_rank(b) != rank || terse_comm_size(b) != world)
    fail("new communicators disagree on rank or size");
  terse_comm_t* order[] = {a, b, a, comm, b};
  for (size_t k = 0; k < sizeof order / sizeof order[0]; ++k) {
    fill_input();
    memset(out, 0, kCount * sizeof(float));
    s = terse_allreduce(order[k], in, out, kCount, TERSE_FLOAT32, TERSE_SUM, "none", NULL);
    if (s != TERSE_OK)
      fail("allreduce %zu on the interleaved communicators: %s", k, terse_status_name(s));
    for (int i = 0; i < kCount; ++i)
      if (out[i] != expected_sum(i))
        fail("interleaved allreduce %zu: element %d is %g", k, i, out[i]);
  }
  terse_comm_destroy(b);
  terse_comm_destroy(a);
  printf("misuse_c_test: case %s: rank %d: two communicators back to back work\n", current_case,
         rank);
  check_usable(current_case);
}

/* A handle freed twice must not crash (the second free is a no-op or a reported misuse). */
static void case_work_free_twice(void) {
  terse_work_t* work = NULL;
  fill_input();
  terse_status_t s =
      terse_allreduce_async(comm, in, out, kCount, TERSE_FLOAT32, TERSE_SUM, "none", NULL, &work);
  if (s != TERSE_OK) fail("allreduce_async: %s", terse_status_name(s));
  if (terse_work_wait(work) != TERSE_OK) fail("work_wait");
  terse_work_free(work);
  terse_work_free(work);
  printf("misuse_c_test: case %s: rank %d: second terse_work_free survived\n", current_case, rank);
  check_usable(current_case);
}

/* An impossible size is the caller's mistake, not "a bug in terse". */
static void case_feedback_huge(void) {
  const char* codecs[] = {"onebit", "topk", "int8"};
  for (size_t c = 0; c < sizeof codecs / sizeof codecs[0]; ++c) {
    terse_feedback_t* fb = NULL;
    terse_status_t s = terse_feedback_create(codecs[c], SIZE_MAX, &fb);
    printf("misuse_c_test: case %s: rank %d: feedback_create(%s, SIZE_MAX): %s\n", current_case,
           rank, codecs[c], terse_status_name(s));
    if (s != TERSE_INVALID_ARGUMENT)
      fail("feedback_create(%s, SIZE_MAX) gave %s, expected invalid argument", codecs[c],
           terse_status_name(s));
    if (fb) fail("feedback_create failed but set the handle");
  }
}

/* ---- extreme values -------------------------------------------------------------------------- */

/* onebit scales a block by its mean |x|; the last rank's first block holds +-3e38, whose sum of
 * |x| overflows float32. Every decoded value must be finite. The next step sends only small
 * values: its results must be finite too, and large where the residual (what step 0 left out,
 * close to 3e38 for those elements) is added back, which shows it was kept, not zeroed. The
 * huge input is not repeated on step 1: input plus residual would then exceed float32's range
 * by arithmetic, whatever the codec does. */
static void case_onebit_extreme(void) {
  terse_feedback_t* fb = NULL;
  if (terse_feedback_create("onebit", kCount, &fb) != TERSE_OK) fail("feedback_create");
  for (int step = 0; step < 2; ++step) {
    for (int i = 0; i < kCount; ++i) in[i] = 0.001f * (float)(i % 7 - 3);
    if (last_rank() && step == 0) {
      in[0] = 3e38f;
      in[1] = -3e38f;
      in[2] = 3e38f;
    }
    terse_status_t s =
        terse_allreduce(comm, in, out, kCount, TERSE_FLOAT32, TERSE_SUM, "onebit", fb);
    if (s != TERSE_OK) fail("onebit allreduce step %d: %s", step, terse_status_name(s));
    for (int i = 0; i < kCount; ++i)
      if (!isfinite(out[i]))
        fail("onebit step %d: element %d is %g for finite input", step, i, out[i]);
    if (step == 1 && fabsf(out[0]) < 1e30f)
      fail("onebit step 1: element 0 is %g; step 0's residual (about 3e38) was lost", out[0]);
  }
  terse_feedback_destroy(fb);
  printf("misuse_c_test: case %s: rank %d: onebit results finite, step 1 element 0 is %g\n",
         current_case, rank, out[0]);
  check_usable(current_case);
}

/* Documented contract (docs/api.md, "Extreme values"): sums are float32 and AVG is the sum scaled
 * by 1/n, so the AVG of 3e38 on two or more ranks is +Inf on every rank (the sum overflows), never
 * NaN, never a finite wrong value; on one rank it is the value itself. A finite half-range value
 * averages exactly. */
static void case_avg_extreme(void) {
  for (int i = 0; i < kCount; ++i) in[i] = 3e38f;
  terse_status_t s = terse_allreduce(comm, in, out, kCount, TERSE_FLOAT32, TERSE_AVG, "none", NULL);
  if (s != TERSE_OK) fail("AVG allreduce: %s", terse_status_name(s));
  for (int i = 0; i < kCount; ++i) {
    int ok = world == 1 ? out[i] == 3e38f : (isinf(out[i]) && out[i] > 0);
    if (!ok)
      fail("AVG of 3e38 on %d ranks: element %d is %g (contract: %s)", world, i, out[i],
           world == 1 ? "3e38" : "+Inf");
  }
  printf("misuse_c_test: case %s: rank %d: AVG of 3e38 on %d ranks is %g\n", current_case, rank,
         world, out[0]);
  for (int i = 0; i < kCount; ++i) in[i] = 1e38f;
  s = terse_allreduce(comm, in, out, kCount, TERSE_FLOAT32, TERSE_AVG, "none", NULL);
  if (s != TERSE_OK) fail("AVG allreduce of 1e38: %s", terse_status_name(s));
  if (world <= 3)
    for (int i = 0; i < kCount; ++i)
      if (!isfinite(out[i]) || fabsf(out[i] - 1e38f) > 1e38f * 1e-6f)
        fail("AVG of 1e38 on %d ranks: element %d is %g", world, i, out[i]);
  check_usable(current_case);
}

/* Documented contract: codec none moves values bit for bit and adds them in IEEE arithmetic, so a
 * NaN in any rank's element makes that element NaN on every rank; the other elements are exact. */
static void case_nan_propagates(void) {
  fill_input();
  if (last_rank()) in[5] = NAN;
  terse_status_t s = terse_allreduce(comm, in, out, kCount, TERSE_FLOAT32, TERSE_SUM, "none", NULL);
  if (s != TERSE_OK) fail("allreduce with a NaN: %s", terse_status_name(s));
  for (int i = 0; i < kCount; ++i) {
    if (i == 5) {
      if (!isnan(out[i])) fail("element 5 is %g; a NaN input must give NaN", out[i]);
    } else if (out[i] != expected_sum(i)) {
      fail("element %d is %g beside a NaN, expected %g", i, out[i], expected_sum(i));
    }
  }
  check_usable(current_case);
}

/* ---- abort: last, the communicator is dead after it ------------------------------------------ */

static void case_abort(void) {
  if (last_rank()) {
    terse_comm_abort(comm, "misuse_c_test aborts on purpose");
    printf("misuse_c_test: case %s: rank %d aborted and stays alive\n", current_case, rank);
    fflush(stdout);
    sleep(5); /* alive past ABORT_LIMIT_S: the peers must not need this process to exit */
    return;
  }
  double dt;
  terse_status_t s = timed_allreduce(kCount, TERSE_FLOAT32, TERSE_SUM, "none", &dt);
  report("(peer) got", s, dt);
  if (s == TERSE_OK) fail("allreduce against an aborted rank returned ok");
  if (dt >= ABORT_LIMIT_S)
    fail("took %.3f s to learn of rank %d's abort (limit %.1f s)", dt, world - 1, ABORT_LIMIT_S);
  char name[32];
  snprintf(name, sizeof name, "rank %d", world - 1);
  expect_message_has(name);
  printf("misuse_c_test: case %s: rank %d: message: %s\n", current_case, rank, terse_last_error());
}

/* ---------------------------------------------------------------------------------------------- */

struct test_case {
  const char* name;
  void (*run)(void);
};

static const struct test_case cases[] = {
    {"codec_bogus", case_codec_bogus},
    {"codec_int8_block3", case_codec_int8_block3},
    {"codec_empty", case_codec_empty},
    {"codec_auto_max_bogus", case_codec_auto_max_bogus},
    {"codec_control_char", case_codec_control_char},
    {"dtype_256", case_dtype_256},
    {"op_256", case_op_256},
    {"null_send", case_null_send},
    {"count_overflow_f32", case_count_overflow_f32},
    {"count_overflow_f16", case_count_overflow_f16},
    {"count_size_max", case_count_size_max},
    {"count_huge_int8", case_count_size_max_int8},
    {"count_huge_topk", case_count_size_max_topk},
    {"count_overflow_all", case_count_overflow_all},
    {"overlap_none", case_overlap_none},
    {"overlap_fp16", case_overlap_fp16},
    {"overlap_bf16", case_overlap_bf16},
    {"overlap_int8", case_overlap_int8},
    {"overlap_topk", case_overlap_topk},
    {"feedback_wrong_count", case_feedback_wrong_count},
    {"async_null_work", case_async_null_work},
    {"reduce_scatter_bad_codec", case_reduce_scatter_bad_codec},
    {"allgather_null_recv", case_allgather_null_recv},
    {"split_null_out", case_split_null_out},
    {"binding_reject", case_binding_reject},
    {"ex_null_options", case_ex_null_options},
    {"ex_struct_size", case_ex_struct_size},
    {"ex_algorithm_bogus", case_ex_algorithm_bogus},
    {"ex_forms_run", case_ex_forms_run},
    {"disagree_count", case_disagree_count},
    {"disagree_dtype", case_disagree_dtype},
    {"disagree_op", case_disagree_op},
    {"disagree_codec", case_disagree_codec},
    {"disagree_codec_params", case_disagree_codec_params},
    {"disagree_auto", case_disagree_auto},
    {"disagree_barrier", case_disagree_barrier},
    {"two_comms", case_two_comms},
    {"work_free_twice", case_work_free_twice},
    {"feedback_huge", case_feedback_huge},
    {"onebit_extreme", case_onebit_extreme},
    {"avg_extreme", case_avg_extreme},
    {"nan_propagates", case_nan_propagates},
    {"abort", case_abort}, /* must stay last */
};
enum { kCases = sizeof cases / sizeof cases[0] };

/* `misuse_c_test create`: one terse_comm_create, reported for the settings driver. */
static int create_only(void) {
  terse_comm_t* c = NULL;
  terse_status_t s = terse_comm_create(&c);
  printf("create: %s: %s\n", terse_status_name(s), terse_last_error());
  fflush(stdout);
  if (s == TERSE_OK) {
    /* A created communicator must also work (a huge timeout once failed every call at once). */
    float x = 1.0f, y = 0.0f;
    terse_status_t r = terse_comm_barrier(c);
    if (r == TERSE_OK) r = terse_allreduce(c, &x, &y, 1, TERSE_FLOAT32, TERSE_SUM, "none", NULL);
    printf("use: %s: %s\n", terse_status_name(r), terse_last_error());
    fflush(stdout);
    terse_comm_destroy(c);
    return r == TERSE_OK ? 0 : 3;
  }
  return s == TERSE_INVALID_ARGUMENT ? 2 : 1;
}

int main(int argc, char** argv) {
  if (argc == 2 && strcmp(argv[1], "create") == 0) return create_only();
  if (argc == 2 && strcmp(argv[1], "--list") == 0) {
    for (int c = 0; c < kCases; ++c) printf("%s\n", cases[c].name);
    return 0;
  }
  for (int a = 1; a < argc; ++a) {
    int known = 0;
    for (int c = 0; c < kCases; ++c) known |= strcmp(argv[a], cases[c].name) == 0;
    if (!known) {
      fprintf(stderr, "misuse_c_test: no case named %s (--list names them)\n", argv[a]);
      return 2;
    }
  }

  terse_status_t s = terse_comm_create(&comm);
  if (s != TERSE_OK) fail("terse_comm_create: %s", terse_status_name(s));
  rank = terse_comm_rank(comm);
  world = terse_comm_size(comm);
  if (world < 2) {
    fprintf(stderr, "misuse_c_test: needs 2 or more ranks (run it under terse-run -n 2)\n");
    return 1;
  }
  in = malloc(kCount * sizeof(float));
  out = malloc(kCount * sizeof(float));
  if (!in || !out) fail("out of memory");
  check_usable("creation");

  int ran = 0, aborted = 0;
  for (int c = 0; c < kCases; ++c) {
    int wanted = argc == 1;
    for (int a = 1; a < argc; ++a) wanted |= strcmp(argv[a], cases[c].name) == 0;
    if (!wanted) continue;
    current_case = cases[c].name;
    cases[c].run();
    ++ran;
    aborted |= cases[c].run == case_abort;
  }
  current_case = "(teardown)";
  if (!aborted) check_usable("the last case");
  terse_comm_destroy(comm);
  free(in);
  free(out);
  printf("misuse_c_test: rank %d of %d: %d cases passed\n", rank, world, ran);
  return 0;
}
