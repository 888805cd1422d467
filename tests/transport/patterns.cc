#include "patterns.h"

#include "harness.h"

#include <gtest/gtest.h>

#include <tuple>

namespace terse::testing {

std::vector<size_t> ringSizes(int worldSize) {
  std::vector<size_t> sizes = {0, 1, 7, 4096, 65537, size_t{1} << 20};
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  // Under a sanitizer every byte of the pattern checks is instrumented: 64 MiB takes minutes and
  // takes no code path that 4 MiB (far above UCX's rendezvous threshold) does not.
  (void)worldSize;
  sizes.push_back(size_t{4} << 20);
#else
  sizes.push_back(worldSize <= 4 ? size_t{64} << 20 : size_t{4} << 20);
#endif
  return sizes;
}

void ringBothDirections(Transport& t, const std::vector<size_t>& sizes) {
  const int n = t.size(), me = t.rank();
  const int right = (me + 1) % n, left = (me + n - 1) % n;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const size_t bytes = sizes[i];
    std::vector<uint8_t> toRight(bytes), toLeft(bytes), fromLeft(bytes + 16), fromRight(bytes + 16);
    fillPattern(toRight, me, right, i);
    fillPattern(toLeft, me, left, i + 1000);
    TransportRequest *r1, *r2, *s1, *s2;
    ASSERT_TRUE(t.irecv(left, 5, fromLeft.data(), fromLeft.size(), &r1).isOk());
    ASSERT_TRUE(t.irecv(right, 6, fromRight.data(), fromRight.size(), &r2).isOk());
    ASSERT_TRUE(t.isend(right, 5, toRight.data(), bytes, &s1).isOk());
    ASSERT_TRUE(t.isend(left, 6, toLeft.data(), bytes, &s2).isOk());
    EXPECT_EQ(waitOk(t, s1), bytes);
    EXPECT_EQ(waitOk(t, s2), bytes);
    EXPECT_EQ(waitOk(t, r1), bytes) << "size " << bytes;
    EXPECT_EQ(waitOk(t, r2), bytes) << "size " << bytes;
    EXPECT_EQ(firstMismatch(fromLeft, bytes, left, me, i), -1)
        << "rank " << me << " from " << left << " size " << bytes;
    EXPECT_EQ(firstMismatch(fromRight, bytes, right, me, i + 1000), -1)
        << "rank " << me << " from " << right << " size " << bytes;
  }
}

void manyInFlight(Transport& t, int perPair, int tags) {
  const int n = t.size(), me = t.rank();
  auto msgBytes = [](int k) { return static_cast<size_t>((k * 37) % 3000); };
  std::vector<std::vector<uint8_t>> out, in;
  std::vector<TransportRequest*> sends, recvs;
  std::vector<std::tuple<int, int, int>> recvWho;  // (src, tag, k)
  auto postRecvs = [&](int tag) {
    for (int src = 0; src < n; ++src)
      for (int k = 0; k < perPair; ++k) {
        in.emplace_back(3000);
        TransportRequest* r;
        ASSERT_TRUE(t.irecv(src, tag, in.back().data(), in.back().size(), &r).isOk());
        recvs.push_back(r);
        recvWho.emplace_back(src, tag, k);
      }
  };
  in.reserve(static_cast<size_t>(n) * perPair * tags);
  out.reserve(static_cast<size_t>(n) * perPair * tags);
  postRecvs(0);
  for (int tag = 0; tag < tags; ++tag)
    for (int k = 0; k < perPair; ++k)
      for (int dst = 0; dst < n; ++dst) {
        out.emplace_back(msgBytes(k));
        fillPattern(out.back(), me, dst, tag * 100000 + k);
        TransportRequest* s;
        ASSERT_TRUE(t.isend(dst, tag, out.back().data(), out.back().size(), &s).isOk());
        sends.push_back(s);
      }
  for (int tag = 1; tag < tags; ++tag) postRecvs(tag);
  for (size_t i = 0; i < recvs.size(); ++i) {
    auto [src, tag, k] = recvWho[i];
    size_t got = waitOk(t, recvs[i]);
    EXPECT_EQ(got, msgBytes(k));
    EXPECT_EQ(firstMismatch(in[i], got, src, me, tag * 100000 + k), -1)
        << "rank " << me << " message " << k << " from " << src << " tag " << tag;
  }
  for (TransportRequest* s : sends) waitOk(t, s);
}

}  // namespace terse::testing
