// The window of a reduce-scatter or allgather as NCCL v11+ describes it: a buffer of nranks x
// bytesPerRank cut into scatter-gather parts. terse runs the whole collective in one call on one
// contiguous buffer, so a window is checked to be all of it, and parts that are not one
// contiguous run are gathered into (or scattered from) a staging copy: memcpy for host parts,
// copies ordered on the comm's stream for device parts.
#pragma once

#include "abi/nccl_plugin.h"

#include "terse/common/status.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace terse::plugin::collnet {

// The restriction shared by ireducescatter and iallgather: the window must be the whole
// nranks x bytesPerRank buffer, and its parts (non-NULL) must add up to it.
Status checkWindow(const char* entry, int nranks, int nParts, const ncclNetSGE_v11_t* parts,
                   size_t bytesPerRank, size_t windowOffset, size_t windowBytes);

// True when each part starts where the previous one ends (then parts[0] is the whole window).
bool singleContiguous(int nParts, const ncclNetSGE_v11_t* parts);

// Copies `bytes` from `src` to `dst`: memcpy when stream is nullptr, else a copy ordered on the
// (device) stream.
Status stageCopy(void* stream, void* dst, const void* src, size_t bytes);

// Copies the parts, in window order, to `dst` (which holds the window's bytes).
Status gatherParts(void* stream, int nParts, const ncclNetSGE_v11_t* parts, uint8_t* dst);

// Copies a staged allgather result into NCCL's parts: rank r's bytes sit at r * stride in
// `staged`; NCCL's window is the unpadded concatenation of partBytes per rank, cut into its
// parts in order. Device copies are waited for: NCCL reads the parts once test says done.
Status scatterAllgather(void* stream, const std::vector<ncclNetSGE_v11_t>& parts,
                        const uint8_t* staged, size_t stride, size_t partBytes);

}  // namespace terse::plugin::collnet
