#include "collnet_window.h"

#include "terse/kernels/device.h"

#include <algorithm>
#include <cstring>

namespace terse::plugin::collnet {

Status checkWindow(const char* entry, int nranks, int nParts, const ncclNetSGE_v11_t* parts,
                   size_t bytesPerRank, size_t windowOffset, size_t windowBytes) {
  size_t total = bytesPerRank * static_cast<size_t>(nranks);
  if (windowOffset != 0 || windowBytes != total)
    return errorInvalidUsage(
        "%s: window [%zu, +%zu) is not the whole %d x %zu-byte buffer; terse's CollNet only "
        "runs whole-buffer windows (windowOffset 0, windowBytes nranks * bytesPerRank)",
        entry, windowOffset, windowBytes, nranks, bytesPerRank);
  if (nParts < 0 || (nParts > 0 && parts == nullptr))
    return errorInvalidArgument("%s: %d parts with a NULL array", entry, nParts);
  size_t sum = 0;
  for (int i = 0; i < nParts; ++i) {
    if (parts[i].size > 0 && parts[i].address == nullptr)
      return errorInvalidArgument("%s: part %d has a NULL address", entry, i);
    sum += parts[i].size;
  }
  if (sum != windowBytes)
    return errorInvalidUsage("%s: the %d parts hold %zu bytes, the window is %zu", entry, nParts,
                             sum, windowBytes);
  return Status::ok();
}

bool singleContiguous(int nParts, const ncclNetSGE_v11_t* parts) {
  for (int i = 1; i < nParts; ++i)
    if (static_cast<const uint8_t*>(parts[i - 1].address) + parts[i - 1].size != parts[i].address)
      return false;
  return true;
}

Status stageCopy(void* stream, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return Status::ok();
  if (stream == nullptr) {
    std::memcpy(dst, src, bytes);
    return Status::ok();
  }
  return device::copyAsync(dst, src, bytes, stream);
}

Status gatherParts(void* stream, int nParts, const ncclNetSGE_v11_t* parts, uint8_t* dst) {
  size_t at = 0;
  for (int i = 0; i < nParts; ++i) {
    TERSE_RETURN_IF_ERROR(stageCopy(stream, dst + at, parts[i].address, parts[i].size));
    at += parts[i].size;
  }
  return Status::ok();
}

Status scatterAllgather(void* stream, const std::vector<ncclNetSGE_v11_t>& parts,
                        const uint8_t* staged, size_t stride, size_t partBytes) {
  size_t windowAt = 0;
  for (const auto& part : parts) {
    size_t copied = 0;
    while (copied < part.size) {
      size_t rank = (windowAt + copied) / partBytes;
      size_t within = (windowAt + copied) % partBytes;
      size_t n = std::min(part.size - copied, partBytes - within);
      TERSE_RETURN_IF_ERROR(stageCopy(stream, static_cast<uint8_t*>(part.address) + copied,
                                      staged + rank * stride + within, n));
      copied += n;
    }
    windowAt += part.size;
  }
  if (stream != nullptr) TERSE_RETURN_IF_ERROR(device::synchronize(stream));
  return Status::ok();
}

}  // namespace terse::plugin::collnet
