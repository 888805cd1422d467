#include "test_util.h"

#include "terse/kernels/element_type.h"

#include <gtest/gtest.h>

namespace terse::test {

float TypedBuffer::get(size_t i) const { return loadElement(dt, bytes.data(), i); }

void TypedBuffer::set(size_t i, float v) { storeElement(dt, bytes.data(), i, v); }

std::vector<float> TypedBuffer::toFloat() const {
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = get(i);
  return out;
}

TypedBuffer TypedBuffer::fromFloat(DataType dt, const std::vector<float>& v) {
  TypedBuffer b(dt, v.size());
  for (size_t i = 0; i < v.size(); ++i) b.set(i, v[i]);
  return b;
}

std::vector<float> randomValues(size_t n, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> decade(-3, 2);
  std::uniform_int_distribution<int> kind(0, 19);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    int k = kind(rng);
    if (k == 0)
      v[i] = 0.0f;
    else if (k == 1 && i > 0)
      v[i] = -v[i - 1];  // a tie in magnitude
    else
      v[i] = scale * normal(rng) * std::pow(10.0f, static_cast<float>(decade(rng)));
  }
  return v;
}

std::shared_ptr<const Codec> codecOrDie(const std::string& spec) {
  auto c = makeCodec(spec);
  EXPECT_TRUE(c.isOk()) << spec << ": " << c.status().toString();
  return c.isOk() ? *c : nullptr;
}

const std::vector<DataType>& allTypes() {
  static const std::vector<DataType> types = {DataType::kFloat32, DataType::kFloat16,
                                              DataType::kBFloat16};
  return types;
}

std::string typeName(DataType dt) { return dataTypeName(dt); }

}  // namespace terse::test
