// Built against an installed terse, by find_package and by pkg-config (tests/package).
#include <terse/terse.h>
#include <cstdio>
int main() {
  auto comm = terse::Communicator::createFromEnv();
  if (!comm.isOk()) {
    std::printf("%s\n", comm.status().toString().c_str());
    return 1;
  }
  float x[3] = {1, 2, 3}, y[3];
  terse::Status s = (*comm)->allreduce(x, y, 3, terse::DataType::kFloat32, terse::ReduceOp::kSum,
                                       {"bf16", nullptr});
  std::printf("%s %g %g %g\n", s.toString().c_str(), y[0], y[1], y[2]);
  return s.isOk() ? 0 : 1;
}
