#include "terse/transport/group.h"

#include <algorithm>
#include <string>

namespace terse {
namespace {

class GroupTransport final : public Transport {
 public:
  GroupTransport(Transport& parent, std::vector<int> members, uint32_t space, int rank,
                 std::string kind)
      : parent_(parent),
        members_(std::move(members)),
        space_(space),
        rank_(rank),
        kind_(std::move(kind)) {}

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  std::string describe() const override {
    return parent_.describe() + " group " + std::to_string(space_) + " of " +
           std::to_string(members_.size());
  }

  // A group of this group is a group of the parent: its members as parent ranks (tag spaces
  // are the parent's, so nesting never stacks them).
  Transport& parent() const { return parent_; }
  int parentRank(int member) const { return members_[member]; }
  const std::vector<int>& members() const { return members_; }
  const std::string& kind() const { return kind_; }

  Status isend(int peer, uint64_t tag, const void* data, size_t bytes,
               TransportRequest** request) override {
    uint64_t outer = 0;
    TERSE_RETURN_IF_ERROR(map("isend", peer, tag, &outer));
    return parent_.isend(members_[peer], outer, data, bytes, request);
  }
  Status irecv(int peer, uint64_t tag, void* data, size_t capacity,
               TransportRequest** request) override {
    uint64_t outer = 0;
    TERSE_RETURN_IF_ERROR(map("irecv", peer, tag, &outer));
    return parent_.irecv(members_[peer], outer, data, capacity, request);
  }
  Status test(TransportRequest* r, bool* done, size_t* bytes) override {
    return parent_.test(r, done, bytes);
  }
  Status wait(TransportRequest* r, size_t* bytes, std::chrono::milliseconds timeout) override {
    return parent_.wait(r, bytes, timeout);
  }
  void cancel(TransportRequest* r) override { parent_.cancel(r); }
  void progress() override { parent_.progress(); }
  void abort(const Status& why) override { parent_.abort(why); }
  void disconnect(int peer, const Status& why) override {
    if (peer >= 0 && peer < size()) parent_.disconnect(members_[peer], why);
  }

 private:
  // The group's (peer, tag) on the parent, or an error naming what is out of range. Messages
  // name group ranks: the parent's errors name parent ranks, which the caller can map back.
  Status map(const char* verb, int peer, uint64_t tag, uint64_t* outer) const {
    if (peer < 0 || peer >= size())
      return errorInvalidArgument("%s: peer %d is outside the group of %d ranks", verb, peer,
                                  size());
    if (tag >= (kFailureNoticeTag & ~uint64_t{0xffff})) {
      *outer = tag;  // the reserved range: shared by every group
      return Status::ok();
    }
    if (tag > kMaxGroupTag)
      return errorInvalidArgument("%s: tag %llu is above a group's %d-bit tags", verb,
                                  static_cast<unsigned long long>(tag), kGroupTagBits);
    *outer = (uint64_t{space_} << kGroupTagBits) | tag;
    return Status::ok();
  }

  Transport& parent_;
  const std::vector<int> members_;
  const uint32_t space_;
  const int rank_;
  const std::string kind_;
};

}  // namespace

Result<std::unique_ptr<Transport>> createGroupTransport(Transport& parent, std::vector<int> members,
                                                        uint32_t space, const std::string& kind) {
  if (space > kMaxGroupSpace)
    return errorInvalidArgument("group tag space %u is outside 0..%u", space, kMaxGroupSpace);
  if (members.empty()) return errorInvalidArgument("a group needs at least one member");
  std::vector<int> sorted = members;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    return errorInvalidArgument("a group lists a rank twice");
  if (sorted.front() < 0 || sorted.back() >= parent.size())
    return errorInvalidArgument("a group member is outside the world of %d ranks", parent.size());
  auto me = std::find(members.begin(), members.end(), parent.rank());
  if (me == members.end())
    return errorInvalidArgument("rank %d builds a group it is not a member of", parent.rank());
  const int rank = static_cast<int>(me - members.begin());
  if (auto* group = dynamic_cast<GroupTransport*>(&parent)) {
    for (int& m : members) m = group->parentRank(m);
    return std::unique_ptr<Transport>(
        new GroupTransport(group->parent(), std::move(members), space, rank, kind));
  }
  return std::unique_ptr<Transport>(
      new GroupTransport(parent, std::move(members), space, rank, kind));
}

Transport* groupWorld(Transport& t, std::vector<int>* members, std::string* kind) {
  auto* group = dynamic_cast<GroupTransport*>(&t);
  if (group == nullptr) return nullptr;
  if (members) *members = group->members();
  if (kind) *kind = group->kind();
  return &group->parent();
}

std::string rankName(Transport& t, int rank) {
  auto* group = dynamic_cast<GroupTransport*>(&t);
  if (group == nullptr || rank < 0 || rank >= group->size()) return "rank " + std::to_string(rank);
  return "rank " + std::to_string(group->parentRank(rank)) + " (rank " + std::to_string(rank) +
         " of this " + group->kind() + ")";
}

}  // namespace terse
