// The element types the kernels take (float, Half, BFloat16), for the explicit instantiations
// at the end of every kernel source: TERSE_FOR_EACH_ELEMENT_TYPE(M) expands to M(float) M(Half)
// M(BFloat16), so a new element type is added here once.
#pragma once

#define TERSE_FOR_EACH_ELEMENT_TYPE(M) M(float) M(Half) M(BFloat16)
