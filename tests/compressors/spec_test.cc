// makeCodec: accepted specs, canonical spec() round trips, and rejections whose messages say
// what is accepted.
#include "test_util.h"

#include <gtest/gtest.h>

namespace terse::test {
namespace {

TEST(Spec, AcceptsAndCanonicalizes) {
  struct Case {
    std::string in, canonical;
    CodecId id;
  };
  for (const auto& c : std::vector<Case>{
           {"none", "none", CodecId::kNone},
           {"fp16", "fp16", CodecId::kFp16},
           {" bf16 ", "bf16", CodecId::kBf16},
           {"int8", "int8:block=256,round=nearest,seed=0", CodecId::kInt8},
           {"int8:block=32", "int8:block=32,round=nearest,seed=0", CodecId::kInt8},
           {"int8:seed=9, round=stochastic,block=65536", "int8:block=65536,round=stochastic,seed=9",
            CodecId::kInt8},
           {"onebit", "onebit:block=2048", CodecId::kOnebit},
           {"onebit:block=64", "onebit:block=64", CodecId::kOnebit},
           {"topk", "topk:ratio=0.01", CodecId::kTopk},
           {"topk:ratio=1", "topk:ratio=1", CodecId::kTopk},
           {"topk:ratio=0.001", "topk:ratio=0.001", CodecId::kTopk},
           {"topk:ratio=1e-4", "topk:ratio=0.0001", CodecId::kTopk},
           {"fp8", "fp8:format=e4m3,block=256,round=nearest,seed=0", CodecId::kFp8},
           {"fp8:format=e5m2,block=32", "fp8:format=e5m2,block=32,round=nearest,seed=0",
            CodecId::kFp8},
           {"fp8:round=stochastic,seed=4,format=e4m3",
            "fp8:format=e4m3,block=256,round=stochastic,seed=4", CodecId::kFp8},
           {"mxfp8", "mxfp8:round=nearest,seed=0", CodecId::kMxfp8},
           {"mxfp4:round=stochastic", "mxfp4:round=stochastic,seed=0", CodecId::kMxfp4},
           {"int4", "int4:block=64,round=nearest,seed=0", CodecId::kInt4},
           {"int4:block=1024,seed=2,round=stochastic", "int4:block=1024,round=stochastic,seed=2",
            CodecId::kInt4}}) {
    SCOPED_TRACE(c.in);
    auto codec = makeCodec(c.in);
    ASSERT_TRUE(codec.isOk()) << codec.status().toString();
    EXPECT_EQ((*codec)->id(), c.id);
    EXPECT_EQ((*codec)->spec(), c.canonical);
    EXPECT_STREQ(codecName((*codec)->id()), c.canonical.substr(0, c.canonical.find(':')).c_str());
    auto again = makeCodec((*codec)->spec());
    ASSERT_TRUE(again.isOk());
    EXPECT_EQ((*again)->spec(), c.canonical);
    EXPECT_EQ((*again)->maxWireBytes(12345), (*codec)->maxWireBytes(12345));
  }
}

TEST(Spec, RejectsWithHelpfulMessages) {
  struct Case {
    std::string in, mustMention;
  };
  for (const auto& c : std::vector<Case>{{"", "accepted specs"},
                                         {"zstd", "unknown codec 'zstd'"},
                                         {"FP16", "unknown codec"},
                                         {"fp16:block=256", "no parameter 'block'"},
                                         {"int8:blocks=256", "no parameter 'blocks'"},
                                         {"int8:block=100", "power of two between 32 and 65536"},
                                         {"int8:block=16", "power of two between 32 and 65536"},
                                         {"int8:block=131072", "power of two between 32 and 65536"},
                                         {"int8:block=-256", "power of two"},
                                         {"int8:block=abc", "power of two"},
                                         {"onebit:block=0", "power of two between 32 and 65536"},
                                         {"int8:round=up", "round=nearest or round=stochastic"},
                                         {"int8:seed=x", "unsigned decimal integer"},
                                         {"int8:seed=-1", "unsigned decimal integer"},
                                         {"int8:block=256,block=512", "given twice"},
                                         {"int8:block", "key=value"},
                                         {"int8:", "key=value"},
                                         {"int8:block=256,", "key=value"},
                                         {"topk:ratio=0", "(0, 1]"},
                                         {"topk:ratio=1.5", "(0, 1]"},
                                         {"topk:ratio=-0.1", "(0, 1]"},
                                         {"topk:ratio=nan", "not a number"},
                                         {"topk:ratio=0.1x", "not a number"},
                                         {"topk:k=5", "no parameter 'k'"},
                                         {"fp8:format=e3m4", "format=e4m3 or format=e5m2"},
                                         {"fp8:block=48", "power of two between 32 and 65536"},
                                         {"fp8:round=up", "round=nearest or round=stochastic"},
                                         {"mxfp8:block=64", "always 32 elements"},
                                         {"mxfp4:format=e2m1", "no parameter 'format'"},
                                         {"int4:block=16", "power of two between 32 and 65536"},
                                         {"int4:format=e4m3", "no parameter 'format'"},
                                         {"int4:seed=-1", "unsigned decimal"}}) {
    SCOPED_TRACE(c.in);
    auto codec = makeCodec(c.in);
    ASSERT_FALSE(codec.isOk());
    EXPECT_EQ(codec.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(codec.status().message().find(c.mustMention), std::string::npos)
        << codec.status().message();
  }
}

TEST(Spec, Properties) {
  EXPECT_FALSE(codecOrDie("fp16")->wantsErrorFeedback());
  EXPECT_FALSE(codecOrDie("int8")->wantsErrorFeedback());
  EXPECT_TRUE(codecOrDie("onebit")->wantsErrorFeedback());
  EXPECT_TRUE(codecOrDie("topk")->wantsErrorFeedback());
  EXPECT_FALSE(codecOrDie("fp8")->wantsErrorFeedback());
  EXPECT_FALSE(codecOrDie("mxfp8")->wantsErrorFeedback());
  EXPECT_TRUE(codecOrDie("mxfp4")->wantsErrorFeedback());
  EXPECT_TRUE(codecOrDie("int4")->wantsErrorFeedback());
  EXPECT_DOUBLE_EQ(codecOrDie("none")->wireBytesPerElement(), 4.0);
  EXPECT_DOUBLE_EQ(codecOrDie("bf16")->wireBytesPerElement(), 2.0);
  EXPECT_DOUBLE_EQ(codecOrDie("int8")->wireBytesPerElement(), 1.0 + 4.0 / 256);
  EXPECT_DOUBLE_EQ(codecOrDie("onebit")->wireBytesPerElement(), 1.0 / 8 + 4.0 / 2048);
  EXPECT_DOUBLE_EQ(codecOrDie("topk:ratio=0.01")->wireBytesPerElement(), 0.08);
  EXPECT_DOUBLE_EQ(codecOrDie("fp8")->wireBytesPerElement(), 1.0 + 4.0 / 256);
  EXPECT_DOUBLE_EQ(codecOrDie("mxfp8")->wireBytesPerElement(), 1.0 + 1.0 / 32);
  EXPECT_DOUBLE_EQ(codecOrDie("mxfp4")->wireBytesPerElement(), 0.5 + 1.0 / 32);
  EXPECT_DOUBLE_EQ(codecOrDie("int4")->wireBytesPerElement(), 0.5 + 4.0 / 64);
  // maxWireBytes: header plus the exact payload for the largest case.
  EXPECT_EQ(codecOrDie("fp16")->maxWireBytes(0), 40u);
  EXPECT_EQ(codecOrDie("fp16")->maxWireBytes(3), 40u + 8u);
  EXPECT_EQ(codecOrDie("int8:block=32")->maxWireBytes(33), 40u + 8u + 36u);
  EXPECT_EQ(codecOrDie("onebit:block=32")->maxWireBytes(33), 40u + 8u + 8u);
  EXPECT_EQ(codecOrDie("topk:ratio=0.5")->maxWireBytes(5), 40u + 8u * 3u);  // round(2.5) = 3
  // scales padded to 4 bytes, then codes padded to 4 bytes
  EXPECT_EQ(codecOrDie("fp8:block=32")->maxWireBytes(33), 40u + 8u + 36u);
  EXPECT_EQ(codecOrDie("mxfp8")->maxWireBytes(33), 40u + 4u + 36u);
  EXPECT_EQ(codecOrDie("mxfp4")->maxWireBytes(33), 40u + 4u + 20u);  // 17 code bytes
  EXPECT_EQ(codecOrDie("mxfp4")->maxWireBytes(32 * 5), 40u + 8u + 80u);
  EXPECT_EQ(codecOrDie("int4:block=32")->maxWireBytes(65), 40u + 12u + 36u);
}

}  // namespace
}  // namespace terse::test
