#include "terse/collectives/workspaces.h"

#include "terse/collectives/collective_op.h"

namespace terse::detail {

uint8_t* Workspaces::host(Workspace name, size_t bytes) {
  const int slot = static_cast<int>(name);
  // Descriptors are read back, unlike what the provider's sharers write (values that do not
  // change simulated time): once ranks make several calls (auto's agreement, trials and
  // barriers) they are at different calls at once, and a shared slot would mix their views.
  if (provider_ && name != Workspace::kDescriptors) return provider_->workspace(slot, bytes);
  if (host_.size() <= static_cast<size_t>(slot)) host_.resize(slot + 1);
  auto& buf = host_[slot];
  if (buf.size() < bytes) buf.resize(bytes);
  return buf.data();
}

Result<uint8_t*> Workspaces::wire(const CollectiveOp& op, Workspace name, size_t bytes) {
  if (!op.device) return host(name, bytes);
  const int slot = static_cast<int>(name);
  if (pinned_.size() <= static_cast<size_t>(slot)) pinned_.resize(slot + 1);
  TERSE_ASSIGN_OR_RETURN(void* p, pinned_[slot].reserve(bytes));
  return static_cast<uint8_t*>(p);
}

Result<float*> Workspaces::accumulators(const CollectiveOp& op, size_t elems) {
  if (!op.device)
    return reinterpret_cast<float*>(host(Workspace::kAccumulators, elems * sizeof(float)));
  TERSE_ASSIGN_OR_RETURN(void* p, deviceAcc_.reserve(elems * sizeof(float)));
  return static_cast<float*>(p);
}

}  // namespace terse::detail
