// The flat C API: opaque handles over the C++ classes. No exception or C++ type crosses this
// line; every failure becomes a status code plus a thread-local message for terse_last_error().
#include <terse/terse.h>

#include "terse/api/internal.h"
#include "terse/collectives/engine.h"
#include "terse/common/logging.h"
#include "terse/compressors/auto_spec.h"
#include "terse/compressors/codec.h"
#include "terse/kernels/device.h"
#include "terse/optim/onebit_adam.h"
#include "terse/optim/sharded_onebit_adam.h"
#include "terse/rendezvous/store.h"

#include <cstddef>
#include <cstring>
#include <exception>
#include <iterator>
#include <mutex>
#include <new>
#include <string>
#include <unordered_set>

struct terse_comm {
  std::unique_ptr<terse::Communicator> comm;
};
struct terse_work {
  terse::Work work;
};
struct terse_feedback {
  terse::ErrorFeedback state;
};
struct terse_onebit_adam {
  terse::OneBitAdam state;
};
struct terse_sharded_onebit_adam {
  terse::ShardedOneBitAdam state;
  std::vector<uint8_t> shrunkParts{};  // the last _shrink_parts' result, for _shrunk_parts
};

namespace terse {

namespace {

// A call the C API refused (an enum out of range) still takes its place in the ranks' sequence.
Work rejectCall(Communicator& comm, CollectiveKind kind, size_t count, Status why) {
  CollectiveOp call;
  call.kind = kind;
  call.count = count;
  return submitRejected(comm, call, std::move(why));
}

}  // namespace
}  // namespace terse

namespace {

thread_local std::string lastError;

// Handles the application holds. C cannot stop a caller from using a freed pointer, but the
// library can recognise one that it does not know: freeing a work handle twice, or waiting on
// a freed one, is then an error (or a no-op for the void functions) instead of a double free.
// A pointer that the allocator has since handed to a new handle is, of course, that handle.
template <typename Handle>
class LiveHandles {
 public:
  Handle* add(Handle* h) {
    std::lock_guard<std::mutex> lock(mu_);
    live_.insert(h);
    return h;
  }
  bool contains(const Handle* h) {
    std::lock_guard<std::mutex> lock(mu_);
    return live_.count(const_cast<Handle*>(h)) != 0;
  }
  // True if `h` was live (and is no longer).
  bool remove(Handle* h) {
    std::lock_guard<std::mutex> lock(mu_);
    return live_.erase(h) != 0;
  }

 private:
  std::mutex mu_;
  std::unordered_set<Handle*> live_;
};

LiveHandles<terse_work>& liveWork() {
  static auto* handles = new LiveHandles<terse_work>();  // outlives static destructors
  return *handles;
}

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

// C enums are ints: a value the C++ enums (8 bits) cannot hold must be refused as itself, not
// truncated into a valid one (256 would run as float32).
terse::Status checkEnums(const char* fn, int dtype, int op, bool reduces) {
  if (dtype < TERSE_FLOAT32 || dtype > TERSE_BFLOAT16)
    return terse::errorInvalidArgument(
        "%s: element type %d is not one of TERSE_FLOAT32, "
        "TERSE_FLOAT16, TERSE_BFLOAT16",
        fn, dtype);
  if (reduces && op != TERSE_SUM && op != TERSE_AVG)
    return terse::errorInvalidArgument("%s: reduction %d is not TERSE_SUM or TERSE_AVG", fn, op);
  return terse::Status::ok();
}

// Runs one collective through the C API: an argument the C layer itself refuses still joins
// the ranks' agreement (as a rejected call), so the peers fail the same call at once.
template <typename Submit>
terse::Work collective(terse_comm_t* comm, const char* fn, terse::CollectiveKind kind, size_t count,
                       int dtype, int op, Submit&& submit) {
  terse::Status bad = checkEnums(fn, dtype, op, kind != terse::CollectiveKind::kAllGather);
  if (!bad.isOk()) return terse::rejectCall(*comm->comm, kind, count, std::move(bad));
  return submit();
}

}  // namespace

namespace {

// The async forms share everything but the kind and the submission.
template <typename Submit>
terse_status_t submitAsync(terse_comm_t* comm, const char* fn, terse::CollectiveKind kind,
                           size_t count, int dtype, int op, terse_work_t** work, Submit&& submit) {
  return guarded([&] {
    if (work == nullptr) {
      // No handle to give back: the call is refused, but it still takes its place among the
      // ranks' calls, so the peers fail it now rather than pair it with this rank's next one.
      return done(terse::rejectCall(*comm->comm, kind, count,
                                    terse::errorInvalidArgument("%s: work is NULL", fn))
                      .wait());
    }
    terse::Work w = collective(comm, fn, kind, count, dtype, op, submit);
    *work = liveWork().add(new terse_work{std::move(w)});
    return done(terse::Status::ok());
  });
}

// The C API's one way of handing bytes back: *size gets the bytes needed; a NULL buffer only
// asks for that, and a buffer smaller than it is refused (serialize, codec and feedback info).
terse_status_t copyOut(const char* fn, const void* data, size_t bytes, void* buffer, size_t* size) {
  const size_t capacity = *size;
  *size = bytes;
  if (buffer == nullptr) return done(terse::Status::ok());
  if (capacity < bytes)
    return fail(terse::errorInvalidArgument("%s: the buffer holds %zu bytes, %zu are needed", fn,
                                            capacity, bytes));
  std::memcpy(buffer, data, bytes);
  return done(terse::Status::ok());
}

// The caller's store (terse_store_ops_t) behind terse's Store interface. Calls are serialised
// here, as the interface promises, so the caller's functions never run concurrently.
class CallbackStore : public terse::Store {
 public:
  explicit CallbackStore(const terse_store_ops_t& ops) : ops_(ops) {}

  terse::Status set(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (ops_.set(ops_.user, key.c_str(), value.data(), value.size()) != 0)
      return terse::errorSystem("the caller's store failed to set key %s", key.c_str());
    return terse::Status::ok();
  }

  terse::Result<std::optional<std::string>> tryGet(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mu_);
    int found = 0;
    const void* value = nullptr;
    size_t size = 0;
    if (ops_.get(ops_.user, key.c_str(), &found, &value, &size) != 0)
      return terse::errorSystem("the caller's store failed to get key %s", key.c_str());
    if (!found) return std::optional<std::string>();
    return std::optional<std::string>(bytes(value, size));
  }

  terse::Result<std::optional<std::string>> setIfAbsent(const std::string& key,
                                                        const std::string& value) override {
    std::lock_guard<std::mutex> lock(mu_);
    int found = 0;
    const void* existing = nullptr;
    size_t size = 0;
    if (ops_.set_if_absent(ops_.user, key.c_str(), value.data(), value.size(), &found, &existing,
                           &size) != 0)
      return terse::errorSystem("the caller's store failed to claim key %s", key.c_str());
    if (!found) return std::optional<std::string>();
    return std::optional<std::string>(bytes(existing, size));
  }

  std::string describe() const override { return "caller's store"; }

 private:
  static std::string bytes(const void* data, size_t size) {
    return size == 0 ? std::string() : std::string(static_cast<const char*>(data), size);
  }

  terse_store_ops_t ops_;
  std::mutex mu_;
};

// TERSE_REQUIRE's message for a NULL argument, where the names are not literals.
terse_status_t nullArgument(const char* fn, const char* arg) {
  const std::string message = std::string(fn) + ": " + arg + " is NULL";
  return fail(TERSE_INVALID_ARGUMENT, message.c_str());
}

// The one ending of every call that makes a state for the caller (create, deserialize): a new
// handle owning it, or the reason it could not be made.
template <typename Handle, typename State>
terse_status_t handOut(terse::Result<State> made, Handle** out) {
  if (!made.isOk()) return fail(made.status());
  *out = new Handle{std::move(made).value()};
  return done(terse::Status::ok());
}

// Every *_serialize: the handle's state as bytes, handed back by copyOut. `fn` names the call
// and `arg` its handle argument.
template <typename Handle>
terse_status_t serializeOut(const char* fn, const char* arg, const Handle* handle, void* buffer,
                            size_t* size) {
  if (!handle) return nullArgument(fn, arg);
  if (!size) return nullArgument(fn, "size");
  return guarded([&] {
    std::vector<uint8_t> bytes = handle->state.serialize();
    return copyOut(fn, bytes.data(), bytes.size(), buffer, size);
  });
}

// The single-buffer *_deserialize: `load` makes the state from (buffer, size).
template <typename Handle, typename Load>
terse_status_t deserializeOut(const char* fn, const char* arg, const void* buffer, Handle** out,
                              Load load) {
  if (!buffer) return nullArgument(fn, "buffer");
  if (!out) return nullArgument(fn, arg);
  return guarded([&] { return handOut(load(), out); });
}

// The members the two Adam option structs share, both ways between C and C++.
template <typename COptions, typename Options>
void adamDefaults(COptions* options, const Options& d) {
  *options = COptions{};
  options->struct_size = sizeof(COptions);
  options->beta1 = d.beta1;
  options->beta2 = d.beta2;
  options->eps = d.eps;
  options->weight_decay = d.weightDecay;
  options->codec = nullptr;
  options->warmup_steps = d.warmupSteps;
}
template <typename COptions, typename Options>
void adamFromC(const COptions* options, Options& o) {
  o.beta1 = options->beta1;
  o.beta2 = options->beta2;
  o.eps = options->eps;
  o.weightDecay = options->weight_decay;
  if (options->codec) o.codec = options->codec;  // else the C++ default
  o.warmupSteps = options->warmup_steps;
}

}  // namespace

extern "C" {

const char* terse_last_error(void) { return lastError.c_str(); }

const char* terse_status_name(terse_status_t status) {
  return terse::statusCodeName(static_cast<terse::StatusCode>(status));
}

const char* terse_version(void) { return TERSE_VERSION_STRING; }

void terse_cuda_info(int* built, int* usable) {
  if (built) *built = terse::device::built() ? 1 : 0;
  if (usable) *usable = terse::device::available() ? 1 : 0;
}

terse_status_t terse_comm_create(terse_comm_t** comm) {
  TERSE_REQUIRE(comm, "terse_comm_create: comm");
  return guarded([&] { return handOut(terse::Communicator::createFromEnv(), comm); });
}

terse_status_t terse_comm_create_with_store(int rank, int size, const terse_store_ops_t* store,
                                            const char* scope, int64_t timeout_ms,
                                            terse_comm_t** comm) {
  TERSE_REQUIRE(comm, "terse_comm_create_with_store: comm");
  TERSE_REQUIRE(store, "terse_comm_create_with_store: store");
  return guarded([&] {
    if (store->struct_size != sizeof(terse_store_ops_t))
      return fail(terse::errorInvalidArgument(
          "terse_comm_create_with_store: store->struct_size is %zu, this library's "
          "terse_store_ops_t has %zu bytes",
          store->struct_size, sizeof(terse_store_ops_t)));
    if (!store->set || !store->get || !store->set_if_absent)
      return fail(terse::errorInvalidArgument(
          "terse_comm_create_with_store: store->set, get and set_if_absent must all be given"));
    if (size < 1 || rank < 0 || rank >= size)
      return fail(terse::errorInvalidArgument(
          "terse_comm_create_with_store: rank %d of %d is not a rank of the world", rank, size));
    std::chrono::milliseconds timeout(timeout_ms);
    if (timeout_ms <= 0) {
      auto fromEnv = terse::timeoutFromEnv();
      if (!fromEnv.isOk()) return fail(fromEnv.status());
      timeout = fromEnv.value();
    }
    CallbackStore callbacks(*store);
    auto made = terse::Communicator::createUcx(rank, size, callbacks, timeout,
                                               scope && *scope ? scope : "comm");
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
int terse_comm_local_rank(const terse_comm_t* comm) {
  return comm ? comm->comm->topology().localRank : -1;
}
int terse_comm_local_size(const terse_comm_t* comm) {
  return comm ? comm->comm->topology().localSize : -1;
}
int terse_comm_node(const terse_comm_t* comm) { return comm ? comm->comm->topology().node : -1; }
int terse_comm_node_count(const terse_comm_t* comm) {
  return comm ? comm->comm->topology().nodeCount : -1;
}

terse_status_t terse_comm_barrier(terse_comm_t* comm) {
  TERSE_REQUIRE(comm, "terse_comm_barrier: comm");
  return guarded([&] { return done(comm->comm->barrier()); });
}

terse_status_t terse_comm_split(terse_comm_t* comm, int color, int key, terse_comm_t** out) {
  TERSE_REQUIRE(comm, "terse_comm_split: comm");
  return guarded([&] {
    if (out == nullptr) {
      // Refused, but still in the ranks' sequence in place of split's exchange (an allgather),
      // so the peers' split fails at once instead of pairing with this rank's next call.
      return done(terse::rejectCall(*comm->comm, terse::CollectiveKind::kAllGather, 0,
                                    terse::errorInvalidArgument("terse_comm_split: out is NULL"))
                      .wait());
    }
    auto made = comm->comm->split(color, key);
    if (!made.isOk()) return fail(made.status());
    *out = made.value() ? new terse_comm{std::move(made).value()} : nullptr;
    return done(terse::Status::ok());
  });
}

terse_status_t terse_comm_shrink(terse_comm_t* comm, const int* exclude, int n_exclude,
                                 terse_comm_t** out) {
  TERSE_REQUIRE(comm, "terse_comm_shrink: comm");
  TERSE_REQUIRE(out, "terse_comm_shrink: out");
  return guarded([&] {
    *out = nullptr;
    if (n_exclude < 0 || (n_exclude > 0 && exclude == nullptr))
      return fail(terse::errorInvalidArgument(
          "terse_comm_shrink: %d excluded ranks at %p (NULL with 0 for none)", n_exclude,
          static_cast<const void*>(exclude)));
    std::vector<int> ranks(exclude, exclude + n_exclude);
    auto made = comm->comm->shrink(ranks);
    if (!made.isOk()) return fail(made.status());
    *out = new terse_comm{std::move(made).value()};
    return done(terse::Status::ok());
  });
}

terse_status_t terse_comm_reject(terse_comm_t* comm, const char* why) {
  TERSE_REQUIRE(comm, "terse_comm_reject: comm");
  return guarded([&] {
    // The text is the binding's, not terse's: escaped and bounded like any other foreign bytes.
    std::string text = why && *why ? terse::printableBytes(why, std::strlen(why), 1024)
                                   : std::string("the binding refused the call");
    return done(comm->comm->reject(terse::errorInvalidArgument("%s", text.c_str())).wait());
  });
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
    return done(
        collective(comm, "terse_allreduce", terse::CollectiveKind::kAllReduce, count, dtype, op,
                   [&] {
                     return terse::submitCall(*comm->comm, terse::CollectiveKind::kAllReduce, send,
                                              recv, count, static_cast<terse::DataType>(dtype),
                                              static_cast<terse::ReduceOp>(op),
                                              options(codec, feedback), true);
                   })
            .wait());
  });
}

terse_status_t terse_reduce_scatter(terse_comm_t* comm, const void* send, void* recv, size_t count,
                                    terse_dtype_t dtype, terse_redop_t op, const char* codec,
                                    terse_feedback_t* feedback) {
  TERSE_REQUIRE(comm, "terse_reduce_scatter: comm");
  return guarded([&] {
    return done(collective(comm, "terse_reduce_scatter", terse::CollectiveKind::kReduceScatter,
                           count, dtype, op,
                           [&] {
                             return terse::submitCall(
                                 *comm->comm, terse::CollectiveKind::kReduceScatter, send, recv,
                                 count, static_cast<terse::DataType>(dtype),
                                 static_cast<terse::ReduceOp>(op), options(codec, feedback), true);
                           })
                    .wait());
  });
}

terse_status_t terse_allgather(terse_comm_t* comm, const void* send, void* recv, size_t count,
                               terse_dtype_t dtype, const char* codec, terse_feedback_t* feedback) {
  TERSE_REQUIRE(comm, "terse_allgather: comm");
  return guarded([&] {
    return done(collective(comm, "terse_allgather", terse::CollectiveKind::kAllGather, count, dtype,
                           TERSE_SUM,
                           [&] {
                             return terse::submitCall(
                                 *comm->comm, terse::CollectiveKind::kAllGather, send, recv, count,
                                 static_cast<terse::DataType>(dtype), terse::ReduceOp::kSum,
                                 options(codec, feedback), true);
                           })
                    .wait());
  });
}

terse_status_t terse_allreduce_async(terse_comm_t* comm, const void* send, void* recv, size_t count,
                                     terse_dtype_t dtype, terse_redop_t op, const char* codec,
                                     terse_feedback_t* feedback, terse_work_t** work) {
  TERSE_REQUIRE(comm, "terse_allreduce_async: comm");
  return submitAsync(comm, "terse_allreduce_async", terse::CollectiveKind::kAllReduce, count, dtype,
                     op, work, [&] {
                       return comm->comm->allreduceAsync(
                           send, recv, count, static_cast<terse::DataType>(dtype),
                           static_cast<terse::ReduceOp>(op), options(codec, feedback));
                     });
}

terse_status_t terse_reduce_scatter_async(terse_comm_t* comm, const void* send, void* recv,
                                          size_t count, terse_dtype_t dtype, terse_redop_t op,
                                          const char* codec, terse_feedback_t* feedback,
                                          terse_work_t** work) {
  TERSE_REQUIRE(comm, "terse_reduce_scatter_async: comm");
  return submitAsync(comm, "terse_reduce_scatter_async", terse::CollectiveKind::kReduceScatter,
                     count, dtype, op, work, [&] {
                       return comm->comm->reduceScatterAsync(
                           send, recv, count, static_cast<terse::DataType>(dtype),
                           static_cast<terse::ReduceOp>(op), options(codec, feedback));
                     });
}

terse_status_t terse_allgather_async(terse_comm_t* comm, const void* send, void* recv, size_t count,
                                     terse_dtype_t dtype, const char* codec,
                                     terse_feedback_t* feedback, terse_work_t** work) {
  TERSE_REQUIRE(comm, "terse_allgather_async: comm");
  return submitAsync(comm, "terse_allgather_async", terse::CollectiveKind::kAllGather, count, dtype,
                     TERSE_SUM, work, [&] {
                       return comm->comm->allgatherAsync(send, recv, count,
                                                         static_cast<terse::DataType>(dtype),
                                                         options(codec, feedback));
                     });
}

void terse_call_options_default(terse_call_options_t* options) {
  if (!options) return;
  *options = terse_call_options_t{};
  options->struct_size = sizeof(terse_call_options_t);
}

}  // extern "C"

namespace {

// The _ex forms: the options are read (or refused, as a rejected call every rank sees) before
// the call is submitted; `work` NULL blocks (submit's second argument: the caller waits at once).
template <typename Submit>
terse_status_t submitEx(terse_comm_t* comm, const char* fn, terse::CollectiveKind kind,
                        size_t count, int dtype, int op, const terse_call_options_t* options,
                        terse_work_t** work, Submit&& submit) {
  return guarded([&] {
    terse::Status bad;
    if (options == nullptr)
      bad = terse::errorInvalidArgument(
          "%s: options is NULL (fill them with "
          "terse_call_options_default)",
          fn);
    else if (options->struct_size != sizeof(terse_call_options_t))
      bad = terse::errorInvalidArgument(
          "%s: options.struct_size is %zu, this library's struct has %zu bytes (fill it with "
          "terse_call_options_default)",
          fn, options->struct_size, sizeof(terse_call_options_t));
    terse::Work w;
    if (!bad.isOk()) {
      w = terse::rejectCall(*comm->comm, kind, count, std::move(bad));
    } else {
      terse::CollectiveOptions o = ::options(options->codec, options->feedback);
      if (options->algorithm) o.algorithm = options->algorithm;
      w = collective(comm, fn, kind, count, dtype, op, [&] { return submit(o, work == nullptr); });
    }
    if (work == nullptr) return done(w.wait());
    *work = liveWork().add(new terse_work{std::move(w)});
    return done(terse::Status::ok());
  });
}

// The dead ranks' checkpoint parts of the sharded optimizer's shrink. NULL arrays go on to the
// exchange as one NULL part, which every rank refuses alike: a refusal here, on this rank alone,
// would leave the peers waiting in the exchange until the timeout.
std::vector<std::pair<const void*, size_t>> lostPartViews(const void* const* lost_parts,
                                                          const size_t* lost_sizes,
                                                          size_t num_lost) {
  std::vector<std::pair<const void*, size_t>> views;
  if (num_lost > 0 && (!lost_parts || !lost_sizes))
    views.emplace_back(nullptr, 0);
  else
    for (size_t i = 0; i < num_lost; ++i) views.emplace_back(lost_parts[i], lost_sizes[i]);
  return views;
}

}  // namespace

extern "C" {

terse_status_t terse_allreduce_ex(terse_comm_t* comm, const void* send, void* recv, size_t count,
                                  terse_dtype_t dtype, terse_redop_t op,
                                  const terse_call_options_t* options, terse_work_t** work) {
  TERSE_REQUIRE(comm, "terse_allreduce_ex: comm");
  return submitEx(comm, "terse_allreduce_ex", terse::CollectiveKind::kAllReduce, count, dtype, op,
                  options, work, [&](const terse::CollectiveOptions& o, bool blocking) {
                    return terse::submitCall(*comm->comm, terse::CollectiveKind::kAllReduce, send,
                                             recv, count, static_cast<terse::DataType>(dtype),
                                             static_cast<terse::ReduceOp>(op), o, blocking);
                  });
}

terse_status_t terse_reduce_scatter_ex(terse_comm_t* comm, const void* send, void* recv,
                                       size_t count, terse_dtype_t dtype, terse_redop_t op,
                                       const terse_call_options_t* options, terse_work_t** work) {
  TERSE_REQUIRE(comm, "terse_reduce_scatter_ex: comm");
  return submitEx(comm, "terse_reduce_scatter_ex", terse::CollectiveKind::kReduceScatter, count,
                  dtype, op, options, work, [&](const terse::CollectiveOptions& o, bool blocking) {
                    return terse::submitCall(*comm->comm, terse::CollectiveKind::kReduceScatter,
                                             send, recv, count, static_cast<terse::DataType>(dtype),
                                             static_cast<terse::ReduceOp>(op), o, blocking);
                  });
}

terse_status_t terse_allgather_ex(terse_comm_t* comm, const void* send, void* recv, size_t count,
                                  terse_dtype_t dtype, const terse_call_options_t* options,
                                  terse_work_t** work) {
  TERSE_REQUIRE(comm, "terse_allgather_ex: comm");
  return submitEx(comm, "terse_allgather_ex", terse::CollectiveKind::kAllGather, count, dtype,
                  TERSE_SUM, options, work, [&](const terse::CollectiveOptions& o, bool blocking) {
                    return terse::submitCall(*comm->comm, terse::CollectiveKind::kAllGather, send,
                                             recv, count, static_cast<terse::DataType>(dtype),
                                             terse::ReduceOp::kSum, o, blocking);
                  });
}

terse_status_t terse_codec_info(const char* spec, char* canonical, size_t* size,
                                int* wants_feedback) {
  TERSE_REQUIRE(spec, "terse_codec_info: spec");
  TERSE_REQUIRE(size, "terse_codec_info: size");
  return guarded([&] {
    std::string text;
    bool wants = false;
    if (terse::isAutoSpec(spec)) {
      auto parsed = terse::parseAutoSpec(spec);
      if (!parsed.isOk()) return fail(parsed.status());
      text = parsed->canonical;
      for (const std::string& candidate : parsed->candidates) {
        auto codec = terse::makeCodec(candidate);
        if (!codec.isOk()) return fail(codec.status());
        wants = wants || (*codec)->wantsErrorFeedback();
      }
    } else {
      auto codec = terse::makeCodec(spec);
      if (!codec.isOk()) return fail(codec.status());
      text = (*codec)->spec();
      wants = (*codec)->wantsErrorFeedback();
    }
    if (wants_feedback) *wants_feedback = wants ? 1 : 0;
    return copyOut("terse_codec_info", text.c_str(), text.size() + 1, canonical, size);
  });
}

terse_status_t terse_work_test(terse_work_t* work) {
  TERSE_REQUIRE(work, "terse_work_test: work");
  if (!liveWork().contains(work))
    return fail(TERSE_INVALID_ARGUMENT, "terse_work_test: not a live work handle (freed?)");
  if (!work->work.test()) return TERSE_IN_PROGRESS;
  return done(work->work.wait());
}

terse_status_t terse_work_wait(terse_work_t* work) {
  TERSE_REQUIRE(work, "terse_work_wait: work");
  if (!liveWork().contains(work))
    return fail(TERSE_INVALID_ARGUMENT, "terse_work_wait: not a live work handle (freed?)");
  return guarded([&] { return done(work->work.wait()); });
}

void terse_work_free(terse_work_t* work) {
  if (!work) return;
  if (!liveWork().remove(work)) {
    // Freed before (or never made here): freeing it again would corrupt the heap.
    TERSE_WARN(terse::kSubsysInit, "terse_work_free: %p is not a live work handle; ignored",
               static_cast<void*>(work));
    return;
  }
  try {
    (void)work->work.wait();
    delete work;
  } catch (...) {
  }
}

terse_status_t terse_comm_stats(terse_comm_t* comm, terse_stats_t* stats) {
  TERSE_REQUIRE(comm, "terse_comm_stats: comm");
  TERSE_REQUIRE(stats, "terse_comm_stats: stats");
  return guarded([&] {
    const terse::CollectiveStats st = comm->comm->stats();
    auto fill = [](const terse::CollectiveStats::Kind& k, terse_kind_stats_t* out) {
      out->calls = k.calls;
      out->failures = k.failures;
      out->raw_bytes = k.rawBytes;
      out->wire_bytes = k.wireBytes;
      out->seconds = k.seconds;
      out->compress_seconds = k.compressSeconds;
      out->reduce_seconds = k.reduceSeconds;
    };
    fill(st.allreduce, &stats->allreduce);
    fill(st.reduceScatter, &stats->reduce_scatter);
    fill(st.allgather, &stats->allgather);
    fill(st.autoPolicy, &stats->auto_policy);
    stats->barriers = st.barriers;
    return done(terse::Status::ok());
  });
}

terse_status_t terse_comm_stats_auto_pick_count(terse_comm_t* comm, size_t* count) {
  TERSE_REQUIRE(comm, "terse_comm_stats_auto_pick_count: comm");
  TERSE_REQUIRE(count, "terse_comm_stats_auto_pick_count: count");
  return guarded([&] {
    *count = comm->comm->stats().autoPicks.size();
    return done(terse::Status::ok());
  });
}

terse_status_t terse_comm_stats_auto_pick(terse_comm_t* comm, size_t index, char* spec,
                                          size_t* size, uint64_t* calls) {
  TERSE_REQUIRE(comm, "terse_comm_stats_auto_pick: comm");
  TERSE_REQUIRE(size, "terse_comm_stats_auto_pick: size");
  return guarded([&] {
    const terse::CollectiveStats st = comm->comm->stats();
    if (index >= st.autoPicks.size())
      return fail(terse::errorInvalidArgument(
          "terse_comm_stats_auto_pick: index %zu, but auto picked %zu codecs so far", index,
          st.autoPicks.size()));
    auto pick = std::next(st.autoPicks.begin(), static_cast<std::ptrdiff_t>(index));
    if (calls) *calls = pick->second;
    return copyOut("terse_comm_stats_auto_pick", pick->first.c_str(), pick->first.size() + 1, spec,
                   size);
  });
}

terse_status_t terse_feedback_create(const char* codec, size_t count, terse_feedback_t** feedback) {
  TERSE_REQUIRE(codec, "terse_feedback_create: codec");
  TERSE_REQUIRE(feedback, "terse_feedback_create: feedback");
  return guarded([&] { return handOut(terse::ErrorFeedback::create(codec, count), feedback); });
}

void terse_feedback_destroy(terse_feedback_t* feedback) { delete feedback; }

terse_status_t terse_feedback_info(const terse_feedback_t* feedback, char* spec, size_t* size,
                                   size_t* count) {
  TERSE_REQUIRE(feedback, "terse_feedback_info: feedback");
  TERSE_REQUIRE(size, "terse_feedback_info: size");
  return guarded([&] {
    const std::string& text = feedback->state.codecSpec();
    if (count) *count = feedback->state.count();
    return copyOut("terse_feedback_info", text.c_str(), text.size() + 1, spec, size);
  });
}

void terse_feedback_reset(terse_feedback_t* feedback) {
  if (feedback) feedback->state.reset();
}

terse_status_t terse_feedback_worker(terse_feedback_t* feedback, float** residual) {
  TERSE_REQUIRE(feedback, "terse_feedback_worker: feedback");
  TERSE_REQUIRE(residual, "terse_feedback_worker: residual");
  return guarded([&] {
    *residual = feedback->state.worker();  // brings device residuals back to the host first
    return done(terse::Status::ok());
  });
}

terse_status_t terse_feedback_serialize(const terse_feedback_t* feedback, void* buffer,
                                        size_t* size) {
  return serializeOut("terse_feedback_serialize", "feedback", feedback, buffer, size);
}

terse_status_t terse_feedback_deserialize(const void* buffer, size_t size,
                                          terse_feedback_t** feedback) {
  return deserializeOut("terse_feedback_deserialize", "feedback", buffer, feedback,
                        [&] { return terse::ErrorFeedback::deserialize(buffer, size); });
}

terse_status_t terse_feedback_relayout(terse_comm_t* shrunk, int old_rank, int old_world,
                                       terse_feedback_t* const* feedback, size_t n) {
  TERSE_REQUIRE(shrunk, "terse_feedback_relayout: shrunk");
  return guarded([&] {
    // NULL states (or a NULL array) go on to the exchange, which refuses them on every survivor:
    // refusing here alone would leave the others waiting for this rank.
    std::vector<terse::ErrorFeedback*> states(n, nullptr);
    for (size_t i = 0; feedback != nullptr && i < n; ++i)
      if (feedback[i] != nullptr) states[i] = &feedback[i]->state;
    return done(terse::relayoutFeedback(*shrunk->comm, old_rank, old_world, states));
  });
}

// ---- OneBitAdam ------------------------------------------------------------------------------

void terse_onebit_adam_options_default(terse_onebit_adam_options_t* options) {
  if (!options) return;
  terse::OneBitAdamOptions d;
  adamDefaults(options, d);
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
    adamFromC(options, o);
    o.varianceCheckInterval = options->variance_check_interval;
    o.varianceTolerance = options->variance_tolerance;
    o.minWarmupSteps = options->min_warmup_steps;
    o.maxWarmupSteps = options->max_warmup_steps;
    o.averageGradients = options->average_gradients != 0;
    return handOut(terse::OneBitAdam::create(count, o), adam);
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

terse_status_t terse_onebit_adam_shrink(terse_onebit_adam_t* adam, terse_comm_t* shrunk) {
  TERSE_REQUIRE(adam, "terse_onebit_adam_shrink: adam");
  TERSE_REQUIRE(shrunk, "terse_onebit_adam_shrink: shrunk");
  return guarded([&] { return done(adam->state.shrink(*shrunk->comm)); });
}

int64_t terse_onebit_adam_steps(const terse_onebit_adam_t* adam) {
  return adam ? adam->state.steps() : -1;
}

int64_t terse_onebit_adam_frozen_at(const terse_onebit_adam_t* adam) {
  return adam ? adam->state.frozenAt() : -1;
}

terse_status_t terse_onebit_adam_serialize(const terse_onebit_adam_t* adam, void* buffer,
                                           size_t* size) {
  return serializeOut("terse_onebit_adam_serialize", "adam", adam, buffer, size);
}

terse_status_t terse_onebit_adam_deserialize(const void* buffer, size_t size,
                                             terse_onebit_adam_t** adam) {
  return deserializeOut("terse_onebit_adam_deserialize", "adam", buffer, adam,
                        [&] { return terse::OneBitAdam::deserialize(buffer, size); });
}

// ---- ShardedOneBitAdam -----------------------------------------------------------------------

void terse_sharded_onebit_adam_options_default(terse_sharded_onebit_adam_options_t* options) {
  if (!options) return;
  terse::ShardedOneBitAdamOptions d;
  adamDefaults(options, d);
  options->error_feedback = d.errorFeedback ? 1 : 0;
  options->param_codec = nullptr;
  options->local_momentum = d.localMomentum ? 1 : 0;
}

terse_status_t terse_sharded_onebit_adam_create(size_t count, int world_size, int rank,
                                                const terse_sharded_onebit_adam_options_t* options,
                                                terse_sharded_onebit_adam_t** adam) {
  TERSE_REQUIRE(options, "terse_sharded_onebit_adam_create: options");
  TERSE_REQUIRE(adam, "terse_sharded_onebit_adam_create: adam");
  // The struct as first released ended at param_codec; such callers get local_momentum = 0.
  const size_t firstRelease = offsetof(terse_sharded_onebit_adam_options_t, local_momentum);
  const bool hasLocal = options->struct_size == sizeof(terse_sharded_onebit_adam_options_t);
  if (!hasLocal && options->struct_size != firstRelease)
    return fail(terse::errorInvalidArgument(
        "terse_sharded_onebit_adam_create: options.struct_size is %zu, this library's struct has "
        "%zu bytes (fill it with terse_sharded_onebit_adam_options_default)",
        options->struct_size, sizeof(terse_sharded_onebit_adam_options_t)));
  return guarded([&] {
    terse::ShardedOneBitAdamOptions o;
    adamFromC(options, o);
    o.errorFeedback = options->error_feedback != 0;
    o.paramCodec = options->param_codec ? options->param_codec : "none";
    o.localMomentum = hasLocal && options->local_momentum != 0;
    return handOut(terse::ShardedOneBitAdam::create(count, world_size, rank, o), adam);
  });
}

void terse_sharded_onebit_adam_destroy(terse_sharded_onebit_adam_t* adam) { delete adam; }

terse_status_t terse_sharded_onebit_adam_step(terse_sharded_onebit_adam_t* adam, terse_comm_t* comm,
                                              float* params, const float* grads, float lr) {
  TERSE_REQUIRE(adam, "terse_sharded_onebit_adam_step: adam");
  TERSE_REQUIRE(comm, "terse_sharded_onebit_adam_step: comm");
  return guarded([&] { return done(adam->state.step(*comm->comm, params, grads, lr)); });
}

terse_status_t terse_sharded_onebit_adam_reduce(terse_sharded_onebit_adam_t* adam,
                                                terse_comm_t* comm, const float* grads,
                                                float* reduced) {
  TERSE_REQUIRE(adam, "terse_sharded_onebit_adam_reduce: adam");
  TERSE_REQUIRE(comm, "terse_sharded_onebit_adam_reduce: comm");
  return guarded([&] { return done(adam->state.reduce(*comm->comm, grads, reduced)); });
}

terse_status_t terse_sharded_onebit_adam_update(terse_sharded_onebit_adam_t* adam,
                                                terse_comm_t* comm, float* param_shard,
                                                const float* reduced, float lr) {
  TERSE_REQUIRE(adam, "terse_sharded_onebit_adam_update: adam");
  TERSE_REQUIRE(comm, "terse_sharded_onebit_adam_update: comm");
  return guarded([&] { return done(adam->state.update(*comm->comm, param_shard, reduced, lr)); });
}

int64_t terse_sharded_onebit_adam_steps(const terse_sharded_onebit_adam_t* adam) {
  return adam ? adam->state.steps() : -1;
}

int64_t terse_sharded_onebit_adam_frozen_at(const terse_sharded_onebit_adam_t* adam) {
  return adam ? adam->state.frozenAt() : -1;
}

terse_status_t terse_sharded_onebit_adam_shard(const terse_sharded_onebit_adam_t* adam,
                                               size_t* offset, size_t* length) {
  TERSE_REQUIRE(adam, "terse_sharded_onebit_adam_shard: adam");
  if (offset) *offset = adam->state.shardOffset();
  if (length) *length = adam->state.shardLength();
  return done(terse::Status::ok());
}

size_t terse_sharded_onebit_adam_state_bytes(const terse_sharded_onebit_adam_t* adam) {
  return adam ? adam->state.stateBytes() : 0;
}

terse_status_t terse_sharded_onebit_adam_set_buddy_copy(terse_sharded_onebit_adam_t* adam, int on) {
  TERSE_REQUIRE(adam, "terse_sharded_onebit_adam_set_buddy_copy: adam");
  adam->state.setBuddyCopy(on != 0);
  return done(terse::Status::ok());
}

size_t terse_sharded_onebit_adam_buddy_bytes(const terse_sharded_onebit_adam_t* adam) {
  return adam ? adam->state.buddyBytes() : 0;
}

terse_status_t terse_sharded_onebit_adam_shrink_parts(terse_sharded_onebit_adam_t* adam,
                                                      terse_comm_t* shrunk,
                                                      const void* const* lost_parts,
                                                      const size_t* lost_sizes, size_t num_lost) {
  TERSE_REQUIRE(adam, "terse_sharded_onebit_adam_shrink_parts: adam");
  TERSE_REQUIRE(shrunk, "terse_sharded_onebit_adam_shrink_parts: shrunk");
  return guarded([&] {
    auto got =
        adam->state.shrinkParts(*shrunk->comm, lostPartViews(lost_parts, lost_sizes, num_lost));
    if (!got.isOk()) return fail(got.status());
    // [u64 old world], then per old rank: u64 part bytes, the part, u64 parameter-shard floats,
    // the floats (little-endian, as everything terse writes).
    std::vector<uint8_t>& out = adam->shrunkParts;
    out.clear();
    auto putU64 = [&](uint64_t v) {
      for (int k = 0; k < 8; ++k) out.push_back(static_cast<uint8_t>(v >> (8 * k)));
    };
    putU64(got->parts.size());
    for (size_t r = 0; r < got->parts.size(); ++r) {
      putU64(got->parts[r].size());
      out.insert(out.end(), got->parts[r].begin(), got->parts[r].end());
      putU64(got->params[r].size());
      const auto* p = reinterpret_cast<const uint8_t*>(got->params[r].data());
      out.insert(out.end(), p, p + 4 * got->params[r].size());
    }
    return done(terse::Status::ok());
  });
}

terse_status_t terse_sharded_onebit_adam_shrunk_parts(const terse_sharded_onebit_adam_t* adam,
                                                      void* buffer, size_t* size) {
  const char* fn = "terse_sharded_onebit_adam_shrunk_parts";
  if (!adam) return nullArgument(fn, "adam");
  if (!size) return nullArgument(fn, "size");
  return guarded([&] {
    return copyOut(fn, adam->shrunkParts.data(), adam->shrunkParts.size(), buffer, size);
  });
}

terse_status_t terse_sharded_onebit_adam_shrink(terse_sharded_onebit_adam_t* adam,
                                                terse_comm_t* shrunk, const void* const* lost_parts,
                                                const size_t* lost_sizes, size_t num_lost) {
  TERSE_REQUIRE(adam, "terse_sharded_onebit_adam_shrink: adam");
  TERSE_REQUIRE(shrunk, "terse_sharded_onebit_adam_shrink: shrunk");
  return guarded([&] {
    return done(adam->state.shrink(*shrunk->comm, lostPartViews(lost_parts, lost_sizes, num_lost)));
  });
}

terse_status_t terse_sharded_onebit_adam_serialize(const terse_sharded_onebit_adam_t* adam,
                                                   void* buffer, size_t* size) {
  return serializeOut("terse_sharded_onebit_adam_serialize", "adam", adam, buffer, size);
}

extern "C++" {  // a template inside the C API's extern "C" block
namespace {
// Both deserializers: the parts as views, the state `load` builds from them, the handle.
template <typename Load>
terse_status_t shardedAdamFromParts(const char* what, const void* const* parts, const size_t* sizes,
                                    size_t num_parts, terse_sharded_onebit_adam_t** adam,
                                    Load load) {
  if (!parts || !sizes || !adam)
    return fail(terse::errorInvalidArgument("%s: %s is NULL", what,
                                            !parts ? "parts" : (!sizes ? "sizes" : "adam")));
  return guarded([&] {
    std::vector<std::pair<const void*, size_t>> views;
    for (size_t i = 0; i < num_parts; ++i) views.emplace_back(parts[i], sizes[i]);
    return handOut(load(views), adam);
  });
}
}  // namespace
}  // extern "C++"

terse_status_t terse_sharded_onebit_adam_deserialize(const void* const* parts, const size_t* sizes,
                                                     size_t num_parts, int world_size, int rank,
                                                     terse_sharded_onebit_adam_t** adam) {
  return shardedAdamFromParts("terse_sharded_onebit_adam_deserialize", parts, sizes, num_parts,
                              adam, [&](const auto& views) {
                                return terse::ShardedOneBitAdam::deserialize(views, world_size,
                                                                             rank);
                              });
}

terse_status_t terse_sharded_onebit_adam_deserialize_remapped(const void* const* parts,
                                                              const size_t* sizes, size_t num_parts,
                                                              int world_size, int rank,
                                                              size_t count, const int64_t* source,
                                                              terse_sharded_onebit_adam_t** adam) {
  return shardedAdamFromParts("terse_sharded_onebit_adam_deserialize_remapped", parts, sizes,
                              num_parts, adam, [&](const auto& views) {
                                return terse::ShardedOneBitAdam::deserializeRemapped(
                                    views, world_size, rank, count, source);
                              });
}

}  // extern "C"
