#include "terse/common/parallel.h"

#include "terse/common/env.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace terse {

// Settings read in this file (terse/common/env.h: declared next to their readers).
const EnvSetting kCpuThreadsSetting{
    {"TERSE_CPU_THREADS", "int", "0",
     "Threads used by CPU codec kernels on large buffers; 0 means one per hardware thread.", 0,
     1024}};

namespace {

// A fixed pool of workers fed one parallelFor at a time. Each run gets its own Job (shared with
// the workers that join it), so a worker that wakes late never touches a newer run's counters.
// Calls from several threads serialize on submitMutex_; a call made while this thread is
// already inside a run (nesting, in a worker or in the caller) runs inline instead.
class Pool {
 public:
  explicit Pool(size_t threads) {
    // A system that refuses more threads leaves a smaller pool, not an exception on whichever
    // thread first ran a codec (the collective worker, or a caller of the C API).
    for (size_t i = 1; i < threads; ++i) {
      try {
        workers_.emplace_back([this] { workerLoop(); });
      } catch (const std::system_error&) {
        break;
      }
    }
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
  }
  size_t threads() const { return workers_.size() + 1; }

  void run(size_t pieces, const std::function<void(size_t)>& piece) {
    std::lock_guard<std::mutex> submit(submitMutex_);
    auto job = std::make_shared<Job>();
    job->body = &piece;
    job->pieces = pieces;
    job->pending = pieces;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = job;
    }
    wake_.notify_all();
    drain(*job);
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return job->pending == 0; });
    job_.reset();
    // A piece's exception (bad_alloc, say) is the caller's, as if the loop had run inline: it
    // must not end the process on a worker thread, nor leave the run waiting for that piece.
    if (job->error) std::rethrow_exception(job->error);
  }

  static thread_local bool busy;  // this thread is executing a piece

 private:
  struct Job {
    const std::function<void(size_t)>* body = nullptr;
    size_t pieces = 0;
    std::atomic<size_t> next{0};
    size_t pending = 0;        // guarded by mutex_
    std::exception_ptr error;  // the first piece that threw; guarded by mutex_
  };

  void drain(Job& job) {
    busy = true;
    for (;;) {
      size_t i = job.next.fetch_add(1);
      if (i >= job.pieces) break;
      std::exception_ptr thrown;
      try {
        (*job.body)(i);
      } catch (...) {
        thrown = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mutex_);
      if (thrown && !job.error) job.error = thrown;
      if (--job.pending == 0) done_.notify_all();
    }
    busy = false;
  }
  void workerLoop() {
    std::shared_ptr<Job> last;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stop_ || (job_ && job_ != last); });
      if (stop_) return;
      last = job_;
      lock.unlock();
      drain(*last);
      lock.lock();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex submitMutex_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::shared_ptr<Job> job_;
  bool stop_ = false;
};

thread_local bool Pool::busy = false;

Pool& pool() {
  static Pool p([] {
    auto configured = kCpuThreadsSetting.readInt();
    int64_t n = configured.isOk() ? configured.value() : 0;
    if (n <= 0) n = std::max(1u, std::thread::hardware_concurrency());
    return static_cast<size_t>(n);
  }());
  return p;
}

}  // namespace

size_t parallelThreads() { return pool().threads(); }

void parallelFor(size_t n, size_t align, size_t minPerThread,
                 const std::function<void(size_t, size_t)>& body) {
  if (n == 0) return;
  align = std::max<size_t>(align, 1);
  size_t threads = Pool::busy ? 1 : parallelThreads();
  size_t pieces = std::min(threads, std::max<size_t>(1, n / std::max<size_t>(minPerThread, 1)));
  size_t units = (n + align - 1) / align;
  pieces = std::min(pieces, units);
  if (pieces <= 1) {
    body(0, n);
    return;
  }
  size_t unitsPerPiece = (units + pieces - 1) / pieces;
  pool().run(pieces, [&](size_t i) {
    size_t begin = std::min(n, i * unitsPerPiece * align);
    size_t end = std::min(n, (i + 1) * unitsPerPiece * align);
    if (begin < end) body(begin, end);
  });
}

}  // namespace terse
