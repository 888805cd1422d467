// Element-type dispatch shared by the layers that turn a DataType plus a void pointer into a
// typed pointer for the kernels (codecs, device helpers).
#pragma once

#include "terse/kernels/numeric.h"

#include <terse/types.h>

#include <type_traits>

namespace terse {

// Calls fn(T*) with p cast to the element type dt names (float, Half, BFloat16), keeping p's
// constness. Unknown values dispatch as float: callers validate dt first.
template <typename Ptr, typename Fn>
inline auto withElementType(DataType dt, Ptr* p, Fn&& fn) {
  static_assert(std::is_same_v<std::remove_cv_t<Ptr>, void>, "void pointer expected");
  constexpr bool kConst = std::is_const_v<Ptr>;
  switch (dt) {
    case DataType::kFloat16:
      return fn(static_cast<std::conditional_t<kConst, const Half*, Half*>>(p));
    case DataType::kBFloat16:
      return fn(static_cast<std::conditional_t<kConst, const BFloat16*, BFloat16*>>(p));
    case DataType::kFloat32:
    default: return fn(static_cast<std::conditional_t<kConst, const float*, float*>>(p));
  }
}

// Element i of a buffer of type dt, widened to float (tests, benchmarks and other code that
// handles a few elements at a time; the kernels dispatch once per array instead).
inline float loadElement(DataType dt, const void* p, size_t i) {
  return withElementType(dt, p, [i](const auto* t) { return num::load(t, i); });
}

// Stores v as element i of a buffer of type dt, rounded to the type as the codecs round.
inline void storeElement(DataType dt, void* p, size_t i, float v) {
  withElementType(dt, p, [i, v](auto* t) { num::store(t, i, v); });
}

}  // namespace terse
