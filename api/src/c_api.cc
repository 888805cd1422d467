// The flat C API: opaque handles over the C++ classes. No exception or C++ type crosses this
// line; every failure becomes a status code plus a thread-local message for terse_last_error().
#include <terse/terse.h>

#include "terse/optim/onebit_adam.h"

#include <cstring>
#include <exception>
#include <new>
#include <string>

struct terse_comm {
  std::unique_ptr<terse::Communicator> comm;
};
struct terse_work {
  terse::Work work;
};
struct terse_feedback {
  terse::ErrorFeedback state;
};

namespace {

thread_local std::string lastError;

terse_status_t fail(const terse::Status& s) {
  lastError = s.message();
  return static_cast<terse_status_t>(s.code());
}

terse_status_t fail(terse_status_t code, const char* message) {
  lastError = message;
  return code;
}

terse_status_t done(const terse::Status& s) {
  if (s.isOk()) {
    lastError.clear();
    return TERSE_OK;
  }
  return fail(s);
}

// Runs `body`, turning any escaping exception into a status.
template <typename F>
terse_status_t guarded(F&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(TERSE_SYSTEM_ERROR, "out of memory");
  } catch (const std::exception& e) {
    return fail(TERSE_INTERNAL, e.what());
  } catch (...) {
    return fail(TERSE_INTERNAL, "unknown exception");
  }
}

terse::CollectiveOptions options(const char* codec, terse_feedback_t* feedback) {
  terse::CollectiveOptions o;
  o.codec = codec ? codec : "none";
  o.feedback = feedback ? &feedback->state : nullptr;
  return o;
}

#define TERSE_REQUIRE(cond, what)                                      \
  do {                                                                 \
    if (!(cond)) return fail(TERSE_INVALID_ARGUMENT, what " is NULL"); \
  } while (0)

}  // namespace

extern "C" {

const char* terse_last_error(void) { return lastError.c_str(); }

const char* terse_status_name(terse_status_t status) {
  return terse::statusCodeName(static_cast<terse::StatusCode>(status));
}

const char* terse_version(void) { return TERSE_VERSION_STRING; }

terse_status_t terse_comm_create(terse_comm_t** comm) {
  TERSE_REQUIRE(comm, "terse_comm_create: comm");
  return guarded([&] {
    auto made = terse::Communicator::createFromEnv();
    if (!made.isOk()) return fail(made.status());
    *comm = new terse_comm{std::move(made).value()};
    return done(terse::Status::ok());
  });
}

void terse_comm_destroy(terse_comm_t* comm) {
  try {
    delete comm;
  } catch (...) {
  }
}

int terse_comm_rank(const terse_comm_t* comm) { return comm ? comm->comm->rank() : -1; }
int terse_comm_size(const terse_comm_t* comm) { return comm ? comm->comm->size() : -1; }

terse_status_t terse_comm_barrier(terse_comm_t* comm) {
  TERSE_REQUIRE(comm, "terse_comm_barrier: comm");
  return guarded([&] { return done(comm->comm->barrier()); });
}

void terse_comm_abort(terse_comm_t* comm, const char* reason) {
  if (!comm) return;
  try {
    comm->comm->abort(terse::errorInvalidUsage("aborted by the application%s%s", reason ? ": " : "",
                                               reason ? reason : ""));
  } catch (...) {
  }
}

void terse_comm_part(const terse_comm_t* comm, size_t count, size_t* offset, size_t* length) {
  if (!comm) return;
  auto part = comm->comm->partOf(count);
  if (offset) *offset = part.first;
  if (length) *length = part.second;
}

terse_status_t terse_allreduce(terse_comm_t* comm, const void* send, void* recv, size_t count,
                               terse_dtype_t dtype, terse_redop_t op, const char* codec,
                               terse_feedback_t* feedback) {
  TERSE_REQUIRE(comm, "terse_allreduce: comm");
  return guarded([&] {
    return done(comm->comm->allreduce(send, recv, count, static_cast<terse::DataType>(dtype),
                                      static_cast<terse::ReduceOp>(op), options(codec, feedback)));
  });
}

terse_status_t terse_reduce_scatter(terse_comm_t* comm, const void* send, void* recv, size_t count,
                                    terse_dtype_t dtype, terse_redop_t op, const char* codec,
                                    terse_feedback_t* feedback) {
  TERSE_REQUIRE(comm, "terse_reduce_scatter: comm");
  return guarded([&] {
    return done(comm->comm->reduceScatter(send, recv, count, static_cast<terse::DataType>(dtype),
                                          static_cast<terse::ReduceOp>(op),
                                          options(codec, feedback)));
  });
}

terse_status_t terse_allgather(terse_comm_t* comm, const void* send, void* recv, size_t count,
                               terse_dtype_t dtype, const char* codec, terse_feedback_t* feedback) {
  TERSE_REQUIRE(comm, "terse_allgather: comm");
  return guarded([&] {
    return done(comm->comm->allgather(send, recv, count, static_cast<terse::DataType>(dtype),
                                      options(codec, feedback)));
  });
}

terse_status_t terse_allreduce_async(terse_comm_t* comm, const void* send, void* recv, size_t count,
                                     terse_dtype_t dtype, terse_redop_t op, const char* codec,
                                     terse_feedback_t* feedback, terse_work_t** work) {
  TERSE_REQUIRE(comm, "terse_allreduce_async: comm");
  TERSE_REQUIRE(work, "terse_allreduce_async: work");
  return guarded([&] {
    *work = new terse_work{
        comm->comm->allreduceAsync(send, recv, count, static_cast<terse::DataType>(dtype),
                                   static_cast<terse::ReduceOp>(op), options(codec, feedback))};
    return done(terse::Status::ok());
  });
}

terse_status_t terse_work_test(terse_work_t* work) {
  TERSE_REQUIRE(work, "terse_work_test: work");
  if (!work->work.test()) return TERSE_IN_PROGRESS;
  return done(work->work.wait());
}

terse_status_t terse_work_wait(terse_work_t* work) {
  TERSE_REQUIRE(work, "terse_work_wait: work");
  return guarded([&] { return done(work->work.wait()); });
}

void terse_work_free(terse_work_t* work) {
  if (!work) return;
  try {
    (void)work->work.wait();
    delete work;
  } catch (...) {
  }
}

terse_status_t terse_feedback_create(const char* codec, size_t count, terse_feedback_t** feedback) {
  TERSE_REQUIRE(codec, "terse_feedback_create: codec");
  TERSE_REQUIRE(feedback, "terse_feedback_create: feedback");
  return guarded([&] {
    auto made = terse::ErrorFeedback::create(codec, count);
    if (!made.isOk()) return fail(made.status());
    *feedback = new terse_feedback{std::move(made).value()};
    return done(terse::Status::ok());
  });
}

void terse_feedback_destroy(terse_feedback_t* feedback) { delete feedback; }

void terse_feedback_reset(terse_feedback_t* feedback) {
  if (feedback) feedback->state.reset();
}

terse_status_t terse_feedback_serialize(const terse_feedback_t* feedback, void* buffer,
                                        size_t* size) {
  TERSE_REQUIRE(feedback, "terse_feedback_serialize: feedback");
  TERSE_REQUIRE(size, "terse_feedback_serialize: size");
  return guarded([&] {
    std::vector<uint8_t> bytes = feedback->state.serialize();
    size_t capacity = *size;
    *size = bytes.size();
    if (buffer == nullptr) return done(terse::Status::ok());
    if (capacity < bytes.size())
      return fail(terse::errorInvalidArgument(
          "terse_feedback_serialize: the buffer holds %zu bytes, %zu are needed", capacity,
          bytes.size()));
    std::memcpy(buffer, bytes.data(), bytes.size());
    return done(terse::Status::ok());
  });
}

terse_status_t terse_feedback_deserialize(const void* buffer, size_t size,
                                          terse_feedback_t** feedback) {
  TERSE_REQUIRE(buffer, "terse_feedback_deserialize: buffer");
  TERSE_REQUIRE(feedback, "terse_feedback_deserialize: feedback");
  return guarded([&] {
    auto made = terse::ErrorFeedback::deserialize(buffer, size);
    if (!made.isOk()) return fail(made.status());
    *feedback = new terse_feedback{std::move(made).value()};
    return done(terse::Status::ok());
  });
}

// ---- OneBitAdam ------------------------------------------------------------------------------

struct terse_onebit_adam {
  terse::OneBitAdam state;
};

void terse_onebit_adam_options_default(terse_onebit_adam_options_t* options) {
  if (!options) return;
  terse::OneBitAdamOptions d;
  *options = terse_onebit_adam_options_t{};
  options->struct_size = sizeof(terse_onebit_adam_options_t);
  options->beta1 = d.beta1;
  options->beta2 = d.beta2;
  options->eps = d.eps;
  options->weight_decay = d.weightDecay;
  options->codec = nullptr;
  options->warmup_steps = d.warmupSteps;
  options->variance_check_interval = d.varianceCheckInterval;
  options->variance_tolerance = d.varianceTolerance;
  options->min_warmup_steps = d.minWarmupSteps;
  options->max_warmup_steps = d.maxWarmupSteps;
  options->average_gradients = d.averageGradients ? 1 : 0;
}

terse_status_t terse_onebit_adam_create(size_t count, const terse_onebit_adam_options_t* options,
                                        terse_onebit_adam_t** adam) {
  TERSE_REQUIRE(options, "terse_onebit_adam_create: options");
  TERSE_REQUIRE(adam, "terse_onebit_adam_create: adam");
  // A caller built against another layout of the struct must not have its bytes misread.
  if (options->struct_size != sizeof(terse_onebit_adam_options_t))
    return fail(terse::errorInvalidArgument(
        "terse_onebit_adam_create: options.struct_size is %zu, this library's struct has %zu "
        "bytes (fill it with terse_onebit_adam_options_default)",
        options->struct_size, sizeof(terse_onebit_adam_options_t)));
  return guarded([&] {
    terse::OneBitAdamOptions o;
    o.beta1 = options->beta1;
    o.beta2 = options->beta2;
    o.eps = options->eps;
    o.weightDecay = options->weight_decay;
    o.codec = options->codec ? options->codec : "onebit";
    o.warmupSteps = options->warmup_steps;
    o.varianceCheckInterval = options->variance_check_interval;
    o.varianceTolerance = options->variance_tolerance;
    o.minWarmupSteps = options->min_warmup_steps;
    o.maxWarmupSteps = options->max_warmup_steps;
    o.averageGradients = options->average_gradients != 0;
    auto made = terse::OneBitAdam::create(count, o);
    if (!made.isOk()) return fail(made.status());
    *adam = new terse_onebit_adam{std::move(made).value()};
    return done(terse::Status::ok());
  });
}

void terse_onebit_adam_destroy(terse_onebit_adam_t* adam) { delete adam; }

terse_status_t terse_onebit_adam_step(terse_onebit_adam_t* adam, terse_comm_t* comm, float* params,
                                      float* grads, float lr) {
  TERSE_REQUIRE(adam, "terse_onebit_adam_step: adam");
  TERSE_REQUIRE(comm, "terse_onebit_adam_step: comm");
  return guarded([&] { return done(adam->state.step(*comm->comm, params, grads, lr)); });
}

void terse_onebit_adam_reset_residuals(terse_onebit_adam_t* adam) {
  if (adam) adam->state.resetFeedback();
}

int64_t terse_onebit_adam_steps(const terse_onebit_adam_t* adam) {
  return adam ? adam->state.steps() : -1;
}

int64_t terse_onebit_adam_frozen_at(const terse_onebit_adam_t* adam) {
  return adam ? adam->state.frozenAt() : -1;
}

terse_status_t terse_onebit_adam_serialize(const terse_onebit_adam_t* adam, void* buffer,
                                           size_t* size) {
  TERSE_REQUIRE(adam, "terse_onebit_adam_serialize: adam");
  TERSE_REQUIRE(size, "terse_onebit_adam_serialize: size");
  return guarded([&] {
    std::vector<uint8_t> bytes = adam->state.serialize();
    size_t capacity = *size;
    *size = bytes.size();
    if (buffer == nullptr) return done(terse::Status::ok());
    if (capacity < bytes.size())
      return fail(terse::errorInvalidArgument(
          "terse_onebit_adam_serialize: the buffer holds %zu bytes, %zu are needed", capacity,
          bytes.size()));
    std::memcpy(buffer, bytes.data(), bytes.size());
    return done(terse::Status::ok());
  });
}

terse_status_t terse_onebit_adam_deserialize(const void* buffer, size_t size,
                                             terse_onebit_adam_t** adam) {
  TERSE_REQUIRE(buffer, "terse_onebit_adam_deserialize: buffer");
  TERSE_REQUIRE(adam, "terse_onebit_adam_deserialize: adam");
  return guarded([&] {
    auto made = terse::OneBitAdam::deserialize(buffer, size);
    if (!made.isOk()) return fail(made.status());
    *adam = new terse_onebit_adam{std::move(made).value()};
    return done(terse::Status::ok());
  });
}

}  // extern "C"
