/* terse: compressed collectives for data-parallel training.
 *
 * One header for both audiences:
 *  - C (and any language with a C FFI): the terse_* functions below, opaque handles, status codes
 *    and terse_last_error() for the message of the calling thread's last failure.
 *  - C++: include this header and use terse::Communicator (terse/communicator.h) directly.
 *
 * Thread-safety (C API): a communicator may be used from one thread at a time, except
 * terse_comm_abort (any thread) and terse_work_test / terse_work_wait (any thread, on handles of
 * that communicator). Buffers handed to an *_async call must stay valid until its work completes.
 */
#ifndef TERSE_TERSE_H_
#define TERSE_TERSE_H_

#include <stddef.h>
#include <stdint.h>

#include <terse/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct terse_comm terse_comm_t;         /* a group of ranks */
typedef struct terse_work terse_work_t;         /* one submitted collective */
typedef struct terse_feedback terse_feedback_t; /* error-feedback residuals of one tensor */

/* The message of the calling thread's last failed terse_* call ("" after a success). */
const char* terse_last_error(void);
/* A fixed name for a status code, e.g. "remote error". */
const char* terse_status_name(terse_status_t status);
/* Version of the library as "major.minor.patch". */
const char* terse_version(void);
/* What this library does with CUDA device memory. *built: 1 when it was compiled with CUDA, so
 * the collectives and terse_onebit_adam_step take device pointers (docs/cuda.md); 0 otherwise, and
 * then a device pointer passed to them would be read as host memory. *usable: 1 when it was built
 * with CUDA and a CUDA device is usable in this process. Either may be NULL. Bindings ask this
 * before handing terse a device pointer. */
void terse_cuda_info(int* built, int* usable);

/* Creates this process's communicator from the launcher's environment (terse-run, mpirun, srun,
 * torchrun; see docs/env.md). Blocks until every rank arrived or TERSE_TIMEOUT_MS passed. */
terse_status_t terse_comm_create(terse_comm_t** comm);
/* A store the caller provides, for bindings whose framework already has one (the Python
 * package hands PyTorch's c10d store over): terse meets the other ranks through it instead of
 * TERSE_STORE. Every function returns 0 on success and nonzero on failure (the creation then fails
 * naming the key). Values are opaque bytes; keys are NUL-terminated text. get: *found 1 and
 * *value and *size the value (owned by the caller's side and valid until its next call on this
 * store), or *found 0 when the key does not exist yet (terse polls). set_if_absent: sets key only
 * if it does not exist, atomically with respect to the other ranks; *found 0 when this call set it,
 * else 1 with *value and *size the value that was there. The functions are called only during
 * terse_comm_create_with_store, one at a time, from the calling thread or terse's. */
typedef struct terse_store_ops {
  size_t struct_size; /* sizeof(terse_store_ops_t) */
  void* user;         /* passed back to every function */
  int (*set)(void* user, const char* key, const void* value, size_t size);
  int (*get)(void* user, const char* key, int* found, const void** value, size_t* size);
  int (*set_if_absent)(void* user, const char* key, const void* value, size_t size, int* found,
                       const void** existing, size_t* existing_size);
} terse_store_ops_t;
/* A communicator of `size` ranks in which this process is `rank`, meeting the others through
 * `store` with keys under `scope` (every rank of the communicator passes the same scope;
 * communicators sharing a store need different ones; NULL means "comm"). timeout_ms <= 0 takes
 * TERSE_TIMEOUT_MS. The transport and the other TERSE_* settings come from the environment as in
 * terse_comm_create. Blocks until every rank arrived or the timeout passed. */
terse_status_t terse_comm_create_with_store(int rank, int size, const terse_store_ops_t* store,
                                            const char* scope, int64_t timeout_ms,
                                            terse_comm_t** comm);
/* Finishes queued collectives, then closes the connections. NULL is accepted. */
void terse_comm_destroy(terse_comm_t* comm);
int terse_comm_rank(const terse_comm_t* comm);
int terse_comm_size(const terse_comm_t* comm);
/* The two levels (include/terse/topology.h): this rank's index among the ranks of its node and
 * their count, its node's index (nodes numbered by their lowest rank) and the number of nodes.
 * Nodes come from every rank's TERSE_NODE, or its host. -1 for a NULL comm. */
int terse_comm_local_rank(const terse_comm_t* comm);
int terse_comm_local_size(const terse_comm_t* comm);
int terse_comm_node(const terse_comm_t* comm);
int terse_comm_node_count(const terse_comm_t* comm);
terse_status_t terse_comm_barrier(terse_comm_t* comm);
/* A sub-communicator (MPI_Comm_split): collective over `comm`; ranks passing the same `color`
 * form *out, ordered by `key` (ties by rank). A negative color takes part and gets *out = NULL.
 * It shares comm's connections (not its collective thread) in a tag space of its own (at most 62
 * splits per world); destroy it with terse_comm_destroy, before or after comm. */
terse_status_t terse_comm_split(terse_comm_t* comm, int color, int key, terse_comm_t** out);
/* After a failure (or on request: `exclude` names n_exclude live ranks to leave out; NULL and 0
 * for none): the ranks still running agree through the store on who is gone and *out becomes a
 * new communicator of them, ranked densely in comm's order (ncclCommShrink's shape; see
 * docs/reliability.md, "Shrinking after a failure"). Every survivor calls it on a communicator
 * from terse_comm_create (not a split one) with the same exclude list; a rank left out gets
 * TERSE_REMOTE_ERROR. comm stays as it was: destroy it. Needs a store that outlives the dead
 * ranks (TERSE_STORE=<directory>; the TCP store served by rank 0 ends with rank 0). */
terse_status_t terse_comm_shrink(terse_comm_t* comm, const int* exclude, int n_exclude,
                                 terse_comm_t** out);
/* For bindings (the Python package uses it): refuses this rank's next collective call on comm,
 * whose arguments the binding itself found invalid before any terse_* call could see them (a
 * non-contiguous tensor, say). The refused call still takes its place in the ranks' sequence, so
 * the other ranks fail their matching call at once, naming this rank, instead of pairing it with
 * this rank's next call. Returns TERSE_INVALID_ARGUMENT with `why` (may be NULL) as the message. */
terse_status_t terse_comm_reject(terse_comm_t* comm, const char* why);
/* Fails every pending and later operation of this rank with `reason` (may be NULL). */
void terse_comm_abort(terse_comm_t* comm, const char* reason);
/* Offset and length of this rank's part of a count-element tensor (reduce-scatter, allgather). */
void terse_comm_part(const terse_comm_t* comm, size_t count, size_t* offset, size_t* length);

/* Collectives. `codec` is a spec such as "none", "bf16", "int8:block=256", "onebit",
 * "topk:ratio=0.01" (NULL means "none"); `feedback` may be NULL. The blocking forms return when
 * the result is in recv; the async forms store a handle in *work (free it with terse_work_free).
 * allreduce: send/recv hold count elements. reduce_scatter: send holds count, recv this rank's
 * part. allgather: send holds this rank's part, recv all count elements. In CUDA builds, send and
 * recv may both be device memory: the codecs then run on the GPU on the legacy default stream
 * (docs/cuda.md). */
terse_status_t terse_allreduce(terse_comm_t* comm, const void* send, void* recv, size_t count,
                               terse_dtype_t dtype, terse_redop_t op, const char* codec,
                               terse_feedback_t* feedback);
terse_status_t terse_reduce_scatter(terse_comm_t* comm, const void* send, void* recv, size_t count,
                                    terse_dtype_t dtype, terse_redop_t op, const char* codec,
                                    terse_feedback_t* feedback);
terse_status_t terse_allgather(terse_comm_t* comm, const void* send, void* recv, size_t count,
                               terse_dtype_t dtype, const char* codec, terse_feedback_t* feedback);
terse_status_t terse_allreduce_async(terse_comm_t* comm, const void* send, void* recv, size_t count,
                                     terse_dtype_t dtype, terse_redop_t op, const char* codec,
                                     terse_feedback_t* feedback, terse_work_t** work);

terse_status_t terse_reduce_scatter_async(terse_comm_t* comm, const void* send, void* recv,
                                          size_t count, terse_dtype_t dtype, terse_redop_t op,
                                          const char* codec, terse_feedback_t* feedback,
                                          terse_work_t** work);
terse_status_t terse_allgather_async(terse_comm_t* comm, const void* send, void* recv, size_t count,
                                     terse_dtype_t dtype, const char* codec,
                                     terse_feedback_t* feedback, terse_work_t** work);
/* The collectives with every per-call option (CollectiveOptions in C++). Fill the struct with
 * terse_call_options_default, then set what you need. struct_size must equal this library's
 * sizeof(terse_call_options_t): a caller built against another layout is refused, never
 * misread. Bindings that declare their own copy of the struct (the Python package) set
 * struct_size to their copy's size instead of calling _default, which writes the library's
 * whole struct. `work` NULL: the call blocks until the result is in recv; otherwise
 * it is the async form and *work gets the handle. An options struct this library cannot read (NULL,
 * a wrong struct_size) or an unknown algorithm fails the call on every rank, like any other
 * refused argument. */
typedef struct terse_call_options {
  size_t struct_size;         /* sizeof(terse_call_options_t); set by ..._default */
  const char* codec;          /* as above (NULL: "none") */
  terse_feedback_t* feedback; /* may be NULL */
  /* How the call crosses the ranks: "auto" or NULL (TERSE_ALGO, else, where the node layout
   * allows two-level, the faster of it and flat as measured), "flat" or "twolevel" (docs/api.md,
   * "Algorithms"). Every rank must pass the same; "twolevel" where it cannot run is an error on
   * every rank. */
  const char* algorithm;
} terse_call_options_t;
void terse_call_options_default(terse_call_options_t* options);
terse_status_t terse_allreduce_ex(terse_comm_t* comm, const void* send, void* recv, size_t count,
                                  terse_dtype_t dtype, terse_redop_t op,
                                  const terse_call_options_t* options, terse_work_t** work);
terse_status_t terse_reduce_scatter_ex(terse_comm_t* comm, const void* send, void* recv,
                                       size_t count, terse_dtype_t dtype, terse_redop_t op,
                                       const terse_call_options_t* options, terse_work_t** work);
terse_status_t terse_allgather_ex(terse_comm_t* comm, const void* send, void* recv, size_t count,
                                  terse_dtype_t dtype, const terse_call_options_t* options,
                                  terse_work_t** work);
/* What a codec spec means, without a communicator: its canonical form with every parameter
 * spelled out ("topk" -> "topk:ratio=0.01", "auto" -> "auto:max=int8"; what checkpoints and
 * error messages use) and whether the codec wants error feedback (onebit, topk, and auto specs
 * allowed to pick them). `canonical` may be NULL to ask for the size: *size gets the bytes needed
 * (with the terminating NUL), and a buffer smaller than that is TERSE_INVALID_ARGUMENT.
 * `wants_feedback` may be NULL. An invalid spec is TERSE_INVALID_ARGUMENT saying what is
 * accepted. */
terse_status_t terse_codec_info(const char* spec, char* canonical, size_t* size,
                                int* wants_feedback);
/* TERSE_IN_PROGRESS while running, else the collective's final status. Never blocks. */
terse_status_t terse_work_test(terse_work_t* work);
/* Blocks until done; returns the collective's status. */
terse_status_t terse_work_wait(terse_work_t* work);
/* Waits if still running, then frees. NULL is accepted. */
void terse_work_free(terse_work_t* work);

/* What a communicator's collectives did (Communicator::stats() in C++): per kind, calls that
 * succeeded and failed, the caller's bytes, the bytes handed to the transport (what crossed the
 * network from this rank, call descriptors included), and wall time with its codec parts
 * (compress; decode and reduce); the rest of `seconds` is transfer. Waits for the calls submitted
 * before it. */
typedef struct terse_kind_stats {
  uint64_t calls, failures, raw_bytes, wire_bytes;
  double seconds, compress_seconds, reduce_seconds;
} terse_kind_stats_t;
typedef struct terse_stats {
  terse_kind_stats_t allreduce, reduce_scatter, allgather;
  terse_kind_stats_t auto_policy; /* auto's own calibration and measurement calls */
  uint64_t barriers;
} terse_stats_t;
terse_status_t terse_comm_stats(terse_comm_t* comm, terse_stats_t* stats);
/* `auto`'s picks (CollectiveStats::autoPicks in C++): the codecs calls with an `auto` spec ran
 * with, one entry per canonical codec spec, in spec order. *count gets the number of entries;
 * entry `index` gives its spec (`spec` NULL asks the size, as in terse_codec_info) and, into
 * *calls (may be NULL), how many calls ran with it. An index past the last entry is
 * TERSE_INVALID_ARGUMENT. Both wait for the calls submitted before them; entries only grow. */
terse_status_t terse_comm_stats_auto_pick_count(terse_comm_t* comm, size_t* count);
terse_status_t terse_comm_stats_auto_pick(terse_comm_t* comm, size_t index, char* spec,
                                          size_t* size, uint64_t* calls);
/* Error-feedback state for a tensor of `count` elements compressed with `codec`. */
terse_status_t terse_feedback_create(const char* codec, size_t count, terse_feedback_t** feedback);
void terse_feedback_destroy(terse_feedback_t* feedback);
/* The element count and canonical codec spec a state was made (or loaded) for. `spec` may be
 * NULL to ask for the size, as in terse_codec_info; `count` may be NULL. */
terse_status_t terse_feedback_info(const terse_feedback_t* feedback, char* spec, size_t* size,
                                   size_t* count);
void terse_feedback_reset(terse_feedback_t* feedback);
/* The worker residual: `count` floats in host memory, readable and writable in place (what a
 * binding re-lays-out when a model's layout changes, e.g. FSDP at another world size). Valid
 * until the state is used by a collective, reset, loaded or destroyed. */
terse_status_t terse_feedback_worker(terse_feedback_t* feedback, float** residual);
/* Checkpoint form: with buffer NULL (or too small) *size gets the bytes needed and the call
 * returns TERSE_INVALID_ARGUMENT unless buffer was NULL. */
terse_status_t terse_feedback_serialize(const terse_feedback_t* feedback, void* buffer,
                                        size_t* size);
terse_status_t terse_feedback_deserialize(const void* buffer, size_t size,
                                          terse_feedback_t** feedback);
/* After terse_comm_shrink: lays out this survivor's error-feedback states (made for allreduce or
 * reduce-scatter over the old world) for the shrunk communicator `shrunk`, in one exchange
 * (relayoutFeedback in C++; docs/reliability.md, "Residuals after a shrink"). Every survivor
 * calls it with its rank in the old world, the old world's size and its `n` states in the same
 * order (codec and count alike per position). The worker residual stays (this process's own
 * gradient's); the server residuals of the old chunks are gathered, the dead ranks' chunks
 * being zero, and each survivor keeps the chunk it owns in the new world's allreduce. A state
 * an allgather used, states that differ between survivors, a NULL state or a bad old rank fail
 * on every survivor alike with TERSE_INVALID_ARGUMENT; on any failure no state changes. */
terse_status_t terse_feedback_relayout(terse_comm_t* shrunk, int old_rank, int old_world,
                                       terse_feedback_t* const* feedback, size_t n);

/* ---- OneBitAdam (optim/, docs/optim.md) -------------------------------------------------------
 * AdamW whose communication after a warm-up is a compressed, error-fed allreduce of the momentum
 * (1-bit Adam). Warm-up: the gradients are averaged (by the optimizer when average_gradients,
 * else by the caller) and a plain AdamW step follows; then the variance freezes and each step
 * allreduces the momentum with `codec`. Every rank makes the same calls with the same options. */
typedef struct terse_onebit_adam terse_onebit_adam_t;

typedef struct terse_onebit_adam_options {
  size_t struct_size; /* sizeof(terse_onebit_adam_options_t); set by ..._options_default */
  float beta1, beta2, eps, weight_decay;
  const char* codec;    /* the momentum's codec after warm-up, e.g. "onebit" (NULL: "onebit") */
  int64_t warmup_steps; /* > 0: fixed warm-up length; 0: decided from the variance (below) */
  int64_t variance_check_interval; /* automatic warm-up: compare the variance every N steps */
  float variance_tolerance;        /* freeze once its relative L1 change is at most this */
  int64_t min_warmup_steps, max_warmup_steps;
  int average_gradients; /* nonzero: the optimizer averages the warm-up gradients itself */
} terse_onebit_adam_options_t;

/* Fills the defaults (betas 0.9/0.999, eps 1e-8, weight decay 0.01, onebit, 100 warm-up steps). */
void terse_onebit_adam_options_default(terse_onebit_adam_options_t* options);
terse_status_t terse_onebit_adam_create(size_t count, const terse_onebit_adam_options_t* options,
                                        terse_onebit_adam_t** adam);
void terse_onebit_adam_destroy(terse_onebit_adam_t* adam);
/* One step at learning rate lr on params/grads of count float32 (host, or CUDA device memory
 * with kernels on the legacy default stream). Collective over comm. */
terse_status_t terse_onebit_adam_step(terse_onebit_adam_t* adam, terse_comm_t* comm, float* params,
                                      float* grads, float lr);
/* Zeroes the error-feedback residuals (after loading another rank's checkpoint). NULL is accepted.
 */
void terse_onebit_adam_reset_residuals(terse_onebit_adam_t* adam);
/* Steps taken, and the step after which the variance froze (0 while warming up). -1 for NULL. */
int64_t terse_onebit_adam_steps(const terse_onebit_adam_t* adam);
int64_t terse_onebit_adam_frozen_at(const terse_onebit_adam_t* adam);
/* Checkpoint form (moments, frozen variance, residuals, step, options), sized like
 * terse_feedback_serialize. */
terse_status_t terse_onebit_adam_serialize(const terse_onebit_adam_t* adam, void* buffer,
                                           size_t* size);
terse_status_t terse_onebit_adam_deserialize(const void* buffer, size_t size,
                                             terse_onebit_adam_t** adam);
/* After terse_comm_shrink: continue on `shrunk` (collective over it). The replicated state stays;
 * the error-feedback residuals are re-laid out for the new world (worker residual kept, server
 * residuals re-cut, the dead ranks' share lost; terse_feedback_relayout). */
terse_status_t terse_onebit_adam_shrink(terse_onebit_adam_t* adam, terse_comm_t* shrunk);

/* ---- ShardedOneBitAdam (optim/, docs/optim.md "Sharded OneBitAdam") ---------------------------
 * OneBitAdam with ZeRO-1/2 sharded state: each rank keeps the full parameters but the moments
 * only for its shard (the reduce-scatter's part). Warm-up: reduce-scatter of the gradients, AdamW
 * on the shard, all-gather of the parameters; after it the gradients (scaled by the frozen
 * denominator's power of two) go through a compressed reduce-scatter with `codec`. Host memory
 * only for now. Every rank makes the same calls with the same options. */
typedef struct terse_sharded_onebit_adam terse_sharded_onebit_adam_t;

typedef struct terse_sharded_onebit_adam_options {
  size_t struct_size; /* sizeof(terse_sharded_onebit_adam_options_t); set by ..._default */
  float beta1, beta2, eps, weight_decay;
  const char* codec;       /* the reduce-scatter's codec after warm-up (NULL: "int8") */
  int64_t warmup_steps;    /* >= 1 */
  int error_feedback;      /* nonzero: keep the worker residual (onebit/topk); default 0 */
  const char* param_codec; /* the parameter all-gather's codec after warm-up (NULL: "none") */
  int local_momentum;      /* nonzero: send each rank's own momentum, not its gradient (what keeps
                              onebit + error feedback stable, docs/optim.md); default 0. Added after
                              the first release: a struct that ends before it is still accepted. */
} terse_sharded_onebit_adam_options_t;

void terse_sharded_onebit_adam_options_default(terse_sharded_onebit_adam_options_t* options);
terse_status_t terse_sharded_onebit_adam_create(size_t count, int world_size, int rank,
                                                const terse_sharded_onebit_adam_options_t* options,
                                                terse_sharded_onebit_adam_t** adam);
void terse_sharded_onebit_adam_destroy(terse_sharded_onebit_adam_t* adam);
/* params: the full replica (count floats, updated on every rank); grads: this rank's gradient. */
terse_status_t terse_sharded_onebit_adam_step(terse_sharded_onebit_adam_t* adam, terse_comm_t* comm,
                                              float* params, const float* grads, float lr);
/* The step split for a caller that all-gathers the parameters itself (FSDP2): reduce writes
 * this rank's shard of the reduced values (length from _shard), update steps the shard
 * param_shard in place from them. Host memory only; one update after each reduce. */
terse_status_t terse_sharded_onebit_adam_reduce(terse_sharded_onebit_adam_t* adam,
                                                terse_comm_t* comm, const float* grads,
                                                float* reduced);
terse_status_t terse_sharded_onebit_adam_update(terse_sharded_onebit_adam_t* adam,
                                                terse_comm_t* comm, float* param_shard,
                                                const float* reduced, float lr);
int64_t terse_sharded_onebit_adam_steps(const terse_sharded_onebit_adam_t* adam);
int64_t terse_sharded_onebit_adam_frozen_at(const terse_sharded_onebit_adam_t* adam);
/* This rank's shard [offset, offset + length) of the parameters. */
terse_status_t terse_sharded_onebit_adam_shard(const terse_sharded_onebit_adam_t* adam,
                                               size_t* offset, size_t* length);
/* Bytes of optimizer state this rank keeps (moments, scales, residuals). 0 for NULL. */
size_t terse_sharded_onebit_adam_state_bytes(const terse_sharded_onebit_adam_t* adam);
/* The buddy copy (docs/optim.md "Buddy copy and shrink"): nonzero keeps a copy of one other rank's
 * shard state, refreshed at the end of every step, so that _shrink rebuilds a dead rank's shard
 * with nothing lost. Costs one partner's non-replicated state (_buddy_bytes, part of
 * _state_bytes). Off by default and after _deserialize; every rank must set the same (the next
 * step checks). A setter rather than an options field so the options struct keeps its size. */
terse_status_t terse_sharded_onebit_adam_set_buddy_copy(terse_sharded_onebit_adam_t* adam, int on);
size_t terse_sharded_onebit_adam_buddy_bytes(const terse_sharded_onebit_adam_t* adam);
/* After terse_comm_shrink: continue on `shrunk` (collective over it). The dead ranks' shards come
 * from the buddy copies, or else from lost_parts (their serialized parts of the caller's last
 * checkpoint; moments as old as it, worker residual dropped); the state re-shards as
 * _deserialize does. A dead shard in neither: TERSE_INVALID_ARGUMENT on every survivor naming the
 * lost old ranks, state unchanged. lost_parts/lost_sizes may be NULL with num_lost 0. */
terse_status_t terse_sharded_onebit_adam_shrink(terse_sharded_onebit_adam_t* adam,
                                                terse_comm_t* shrunk, const void* const* lost_parts,
                                                const size_t* lost_sizes, size_t num_lost);
/* _shrink's gathering alone, for a caller that re-shards in its own element order
 * (FSDPShardedOneBitAdam): collective over `shrunk` like _shrink; the state is left as it is and
 * the result kept in `adam` for _shrunk_parts: every old rank's checkpoint part as of now (the
 * dead ranks' rebuilt), for _deserialize_remapped, and each dead rank's parameter shard where its
 * buddy copy (kept by _update) holds one. */
terse_status_t terse_sharded_onebit_adam_shrink_parts(terse_sharded_onebit_adam_t* adam,
                                                      terse_comm_t* shrunk,
                                                      const void* const* lost_parts,
                                                      const size_t* lost_sizes, size_t num_lost);
/* That result, sized like terse_feedback_serialize: u64 old world size, then per old rank in
 * order: u64 part bytes, the part, u64 parameter-shard floats (0: none), the floats; all
 * little-endian. Empty (size 0) before any _shrink_parts. */
terse_status_t terse_sharded_onebit_adam_shrunk_parts(const terse_sharded_onebit_adam_t* adam,
                                                      void* buffer, size_t* size);
/* This rank's checkpoint part, sized like terse_feedback_serialize. */
terse_status_t terse_sharded_onebit_adam_serialize(const terse_sharded_onebit_adam_t* adam,
                                                   void* buffer, size_t* size);
/* Builds rank `rank` of a world of `world_size` from the parts of every rank that saved (any
 * world size, any order): the state re-shards. */
terse_status_t terse_sharded_onebit_adam_deserialize(const void* const* parts, const size_t* sizes,
                                                     size_t num_parts, int world_size, int rank,
                                                     terse_sharded_onebit_adam_t** adam);
/* The same where the element order depends on the world size (FSDP2's padded layout): the new
 * state has `count` elements, element k from the saved tensor's element source[k] (-1: new
 * padding, zero state); local momenta and worker residuals become the old ranks' average. */
terse_status_t terse_sharded_onebit_adam_deserialize_remapped(const void* const* parts,
                                                              const size_t* sizes, size_t num_parts,
                                                              int world_size, int rank,
                                                              size_t count, const int64_t* source,
                                                              terse_sharded_onebit_adam_t** adam);

#ifdef __cplusplus
} /* extern "C" */
#include <terse/communicator.h>
#endif

#endif /* TERSE_TERSE_H_ */
