// A first terse program: every rank holds a gradient-like buffer and allreduces it with each
// codec; rank 0 prints how far each result is from the exact sum and how many bytes went out.
//
//   build/bin/terse-run -n 4 -- build/bin/allreduce-example [count]
//
// Each rank can recompute every other rank's input (it is a function of rank and index), so the
// exact sum needs no extra communication.
#include <terse/terse.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

// A smooth "gradient" plus rank-specific noise, like the gradients of one model on different data.
float gradient(int rank, size_t i) {
  float smooth = std::sin(static_cast<float>(i) * 0.001f);
  float noise = static_cast<float>((i * 2654435761u + rank * 40503u) % 1000) / 1000.0f - 0.5f;
  return 0.01f * (smooth + 0.3f * noise);
}

}  // namespace

int main(int argc, char** argv) {
  const size_t count = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : (size_t{1} << 22);
  auto made = terse::Communicator::createFromEnv();
  if (!made.isOk()) {
    std::fprintf(stderr, "allreduce-example: %s\n", made.status().toString().c_str());
    return 1;
  }
  terse::Communicator& comm = *made.value();
  const int n = comm.size(), rank = comm.rank();

  std::vector<float> grad(count), result(count);
  std::vector<double> exact(count, 0.0);
  for (size_t i = 0; i < count; ++i) grad[i] = gradient(rank, i);
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i) exact[i] += gradient(r, i);

  if (rank == 0)
    std::printf("%d ranks, %zu float32 elements (%.1f MiB) each\n%-8s %14s %14s %12s\n", n, count,
                count * 4.0 / (1 << 20), "codec", "max abs error", "rel L2 error", "MiB sent");
  for (const char* codec : {"none", "fp16", "bf16", "int8", "onebit", "topk"}) {
    // onebit and topk need error feedback to converge over steps; one call shows their raw error.
    auto feedback = terse::ErrorFeedback::create(codec, count);
    if (!feedback.isOk()) {
      std::fprintf(stderr, "allreduce-example: %s\n", feedback.status().toString().c_str());
      return 1;
    }
    uint64_t before = comm.bytesSent();
    terse::Status s = comm.allreduce(grad.data(), result.data(), count, terse::DataType::kFloat32,
                                     terse::ReduceOp::kSum, {codec, &feedback.value()});
    if (!s.isOk()) {
      std::fprintf(stderr, "[rank %d] allreduce with %s failed: %s\n", rank, codec,
                   s.toString().c_str());
      return 1;
    }
    double maxErr = 0, errSq = 0, refSq = 0;
    for (size_t i = 0; i < count; ++i) {
      double d = result[i] - exact[i];
      maxErr = std::fmax(maxErr, std::fabs(d));
      errSq += d * d;
      refSq += exact[i] * exact[i];
    }
    if (rank == 0)
      std::printf("%-8s %14.3e %14.3e %12.2f\n", codec, maxErr, std::sqrt(errSq / refSq),
                  (comm.bytesSent() - before) / double(1 << 20));
  }
  return 0;
}
