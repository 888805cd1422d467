// The plugin's checks of bytes and sizes a peer chose, tested directly (the sources are compiled
// in: the plugin .so exports only NCCL's tables). The end-to-end cases, through dlopen and
// forked ranks, are in net_plugin_test.cc.
#include "net_lossless.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace terse::plugin {
namespace {

// A frame is at most the receive plus its header; anything larger is refused, by size alone.
TEST(LosslessFrameSize, RefusesFramesLargerThanTheReceivePlusHeader) {
  for (size_t cap : {size_t{0}, size_t{1}, size_t{4096}, size_t{1} << 30}) {
    EXPECT_TRUE(checkFrameSize(0, cap).isOk()) << cap;
    EXPECT_TRUE(checkFrameSize(kFrameHeaderBytes, cap).isOk()) << cap;
    EXPECT_TRUE(checkFrameSize(cap + kFrameHeaderBytes, cap).isOk()) << cap;
    Status st = checkFrameSize(cap + kFrameHeaderBytes + 1, cap);
    ASSERT_FALSE(st.isOk()) << cap;
    EXPECT_EQ(st.code(), StatusCode::kInvalidUsage);
    EXPECT_NE(st.message().find(std::to_string(cap + kFrameHeaderBytes + 1) + " bytes"),
              std::string::npos)
        << st.message();
  }
  // What a peer could announce at most: must not wrap around into "fits".
  EXPECT_FALSE(checkFrameSize(SIZE_MAX, 4096).isOk());
  EXPECT_FALSE(checkFrameSize(SIZE_MAX, SIZE_MAX - kFrameHeaderBytes - 1).isOk());
  EXPECT_TRUE(checkFrameSize(SIZE_MAX, SIZE_MAX - kFrameHeaderBytes).isOk());
}

// The check never refuses a frame compress() made for a receive as large as the message.
TEST(LosslessFrameSize, AcceptsEveryFrameCompressMakes) {
  LosslessCodec codec;
  for (size_t n : {size_t{18}, size_t{300}, size_t{70000}, size_t{1} << 20}) {
    std::vector<uint8_t> msg(n, 0);
    for (size_t i = 0; i < n; i += 29) msg[i] = static_cast<uint8_t>(i * 7);
    StagingBuffer frame;
    size_t f = codec.compress(msg.data(), n, &frame);
    if (f == 0) continue;
    EXPECT_TRUE(checkFrameSize(f, n).isOk()) << n;
    std::vector<uint8_t> out(n);
    auto got = codec.decompress(frame.data(), f, out.data(), n);
    ASSERT_TRUE(got.isOk()) << got.status().message();
    EXPECT_EQ(out, msg);
  }
}

}  // namespace
}  // namespace terse::plugin
