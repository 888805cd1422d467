// mpi-allreduce-bench: OpenMPI's MPI_Allreduce measured the way terse-bench measures terse, for a
// baseline in the same script: same sizes, warm-up and timed calls, slowest rank's average time,
// same algbw / busbw columns.
//   mpirun -np 4 build/bin/mpi-allreduce-bench -b 64M -e 64M -n 10 -w 3
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

static size_t parseSize(const char* t) {
  char* end = nullptr;
  double v = std::strtod(t, &end);
  if (*end == 'K' || *end == 'k') v *= 1024;
  if (*end == 'M' || *end == 'm') v *= 1024 * 1024;
  if (*end == 'G' || *end == 'g') v *= 1024.0 * 1024 * 1024;
  return static_cast<size_t>(v);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  size_t minBytes = 32 << 20, maxBytes = 32 << 20;
  double factor = 2;
  int iters = 20, warmup = 5;
  std::string json;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "-b")
      minBytes = parseSize(argv[i + 1]);
    else if (a == "-e")
      maxBytes = parseSize(argv[i + 1]);
    else if (a == "-f")
      factor = std::atof(argv[i + 1]);
    else if (a == "-n")
      iters = std::max(1, std::atoi(argv[i + 1]));
    else if (a == "-w")
      warmup = std::max(0, std::atoi(argv[i + 1]));
    else if (a == "-J")
      json = argv[i + 1];
    else {
      if (rank == 0) std::fprintf(stderr, "mpi-allreduce-bench: unknown option %s\n", a.c_str());
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  if (factor <= 1) factor = 2;
  maxBytes = std::max(maxBytes, minBytes);
  FILE* out = rank == 0 && !json.empty() ? std::fopen(json.c_str(), "w") : nullptr;
  if (out) std::fprintf(out, "[\n");
  if (rank == 0) {
    std::printf("# mpi-allreduce-bench: %d ranks, float32 sum, %d warmup + %d timed calls\n", n,
                warmup, iters);
    std::printf("#%11s %12s %10s %8s %8s\n", "size(B)", "count", "time(us)", "algbw", "busbw");
  }
  bool first = true;
  for (size_t bytes = minBytes; bytes <= maxBytes;
       bytes = std::max(bytes + 1, static_cast<size_t>(bytes * factor))) {
    size_t count = bytes / sizeof(float);
    std::vector<float> send(count), recv(count);
    for (size_t i = 0; i < count; ++i) send[i] = static_cast<float>((i * 7 + rank) % 97) / 97.0f;
    for (int i = 0; i < warmup; ++i)
      MPI_Allreduce(send.data(), recv.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; ++i)
      MPI_Allreduce(send.data(), recv.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
    double us = (MPI_Wtime() - t0) * 1e6 / iters, tmax = 0;
    MPI_Reduce(&us, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      double algbw = double(count * 4) / tmax / 1e3, busbw = algbw * 2.0 * (n - 1) / n;
      std::printf("%12zu %12zu %10.1f %8.3f %8.3f\n", count * 4, count, tmax, algbw, busbw);
      std::fflush(stdout);
      if (out)
        std::fprintf(out,
                     "%s  {\"collective\": \"allreduce\", \"impl\": \"openmpi\", \"ranks\": %d, "
                     "\"bytes\": %zu, \"time_us\": %.3f, \"algbw_gbs\": %.6f, \"busbw_gbs\": %.6f}",
                     first ? "" : ",\n", n, count * 4, tmax, algbw, busbw);
      first = false;
    }
  }
  if (out) {
    std::fprintf(out, "\n]\n");
    std::fclose(out);
  }
  MPI_Finalize();
  return 0;
}
