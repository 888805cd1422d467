// fuzz_peer: what the transport, collectives and rendezvous layers read from bytes another rank
// chose, without a transport or store: a UCX rank's published blob (transport/src/
// peer_input.h), the text of a failure notice (same header), the call descriptors peers send at
// the start of every collective (collectives/src/descriptor.h), and the values ranks publish in
// the rendezvous store (rendezvous/src/published.h).
//
// Byte 0 picks the mode, byte 1 is a small parameter (the publishing rank; a descriptor world's
// shape), the rest is the peer's bytes.
//
// Checked besides "no crash / leak / UB": an accepted blob re-encodes to exactly its bytes, with
// a positive pid and a non-empty address within the bounds, and a refused one is kCorrupt naming
// the rank; a notice comes out as printable ASCII only, at most 4 bytes per input byte within
// the bound plus "...", and unescapes to exactly the peer's bytes it used (nothing lost or
// forged); descriptors are refused exactly when one is short or lacks the magic (kCorrupt naming
// the first such rank) or, once all are whole, when one rejected its call or differs from this
// rank's (kInvalidUsage naming the first such rank), and so are the summaries large worlds
// disseminate instead (fuzzSummaries); a published failure keeps only an error
// code (never kOk or kInProgress) and comes out as printable ASCII, bounded; a published value is
// accepted exactly when it starts with the header, and header + payload is the value again.
#include "descriptor.h"
#include "fuzz_util.h"
#include "peer_input.h"
#include "published.h"
#include "terse/transport/give_up.h"

#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace {

using terse::PeerBlob;
using terse::Status;
using terse::StatusCode;
using terse::detail::CallDescriptor;
using terse::fuzz::fail;

enum Mode : uint8_t { kBlob = 0, kNotice = 1, kDescriptors = 2, kPublished = 3, kModes = 4 };

bool names(const Status& st, int rank) {
  return st.message().find("rank " + std::to_string(rank) + " ") != std::string::npos;
}

// --- published blobs -----------------------------------------------------------------------

void fuzzBlob(int rank, const uint8_t* p, size_t n) {
  PeerBlob blob;
  Status st = terse::parsePeerBlob(rank, p, n, &blob);
  if (!st.isOk()) {
    if (st.code() != StatusCode::kCorrupt) fail("a refused blob is not kCorrupt");
    if (!names(st, rank)) fail("a refused blob's error does not name the rank");
    return;
  }
  if (blob.pid <= 0) fail("accepted a pid <= 0");
  if (blob.address.empty() || blob.address.size() > terse::kMaxPeerWorkerAddressBytes)
    fail("accepted an empty or oversized worker address");
  if (blob.host.size() > terse::kMaxPeerHostBytes || blob.host.find('\0') != std::string::npos)
    fail("accepted a host name that is too long or holds a NUL");
  const std::string again = terse::encodePeerBlob(blob);
  if (again.size() != n || std::memcmp(again.data(), p, n) != 0)
    fail("an accepted blob does not re-encode to its bytes");
}

// --- failure notices -----------------------------------------------------------------------

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

void fuzzNotice(size_t maxBytes, const uint8_t* p, size_t n) {
  const std::string text = terse::formatFailureNotice(p, n, maxBytes);
  const size_t used = n < maxBytes ? n : maxBytes;
  std::string body = text;
  if (used < n) {
    if (body.size() < 3 || body.compare(body.size() - 3, 3, "...") != 0)
      fail("a cut notice does not end in ...");
    body.resize(body.size() - 3);
  }
  if (body.size() > 4 * used) fail("a notice grew by more than 4 bytes per input byte");
  for (char c : text)
    if (c < 0x20 || c > 0x7e) fail("a notice holds a byte outside printable ASCII");
  // Unescaping gives back exactly the bytes used: nothing dropped, and no escape a peer could
  // forge (its own backslashes come out escaped).
  std::string back;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\') {
      back += body[i];
      continue;
    }
    if (i + 3 >= body.size()) fail("a notice ends in a cut escape");
    if (body[i + 1] != 'x') fail("a backslash in a notice that is not an escape");
    const int hi = hexValue(body[i + 2]), lo = hexValue(body[i + 3]);
    if (hi < 0 || lo < 0) fail("a notice's escape is not two lower-case hex digits");
    back += static_cast<char>(hi * 16 + lo);
    i += 3;
  }
  if (back.size() != used || std::memcmp(back.data(), p, used) != 0)
    fail("a notice does not unescape to the peer's bytes");
}

// --- call descriptors ----------------------------------------------------------------------

// The fields the engine compares, written out again so the check is not its own reference.
bool sameCallIndependently(const CallDescriptor& a, const CallDescriptor& b) {
  return a.kind == b.kind && a.dtype == b.dtype && a.op == b.op && a.codec == b.codec &&
         a.count == b.count && a.specHash == b.specHash && a.seq == b.seq &&
         a.worldSize == b.worldSize && a.requestedHash == b.requestedHash &&
         a.algorithm == b.algorithm;
}

CallDescriptor validCall(uint8_t kind, uint64_t count, uint32_t seq, uint32_t world) {
  CallDescriptor d{};
  d.magic = terse::detail::kDescriptorMagic;
  d.kind = kind;
  d.dtype = 1;
  d.op = 1;
  d.codec = 3;
  d.count = count;
  d.specHash = 0x9e3779b97f4a7c15ull;
  d.requestedHash = d.specHash;
  std::memcpy(d.requested, "int8:block=256", 14);
  d.seq = seq;
  d.worldSize = world;
  return d;
}

// An agreement's verdict where the first rank whose call differs from this rank's is firstOdd
// (-1: none): agreement exactly when there is none, else kInvalidUsage naming that rank.
void expectVerdict(const Status& verdict, int firstOdd) {
  if (firstOdd < 0) {
    if (!verdict.isOk()) fail("ranks that made the same call were found to disagree");
    return;
  }
  if (verdict.isOk()) fail("ranks that made different calls were found to agree");
  if (verdict.code() != StatusCode::kInvalidUsage || !names(verdict, firstOdd))
    fail("a disagreement is not kInvalidUsage naming the first rank that differs");
}

// Shape byte: world size 2..9 (bits 0-2), this rank's place (bits 3-5), whether this rank
// rejected its own call (bit 6), summaries instead of descriptors (bit 7, fuzzSummaries). The rest:
// this rank's descriptor as 32 bytes XORed into a valid one, then per peer a size byte (below 0xc0:
// a whole descriptor; else 0..63 bytes) and 32 bytes XORed into this rank's descriptor, so sparse
// mutations keep the ranks mostly in step.
void fuzzSummaries(uint8_t shape, const uint8_t* p, size_t n);

// The shape byte's fields, and the rest of the input read as XOR masks (past its end: zeros).
struct Shape {
  Shape(uint8_t shape, const uint8_t* p, size_t n)
      : world(2 + (shape & 7)),
        self(((shape >> 3) & 7) % world),
        rejected((shape & 0x40) != 0),
        p_(p),
        n_(n) {}
  void take(void* dst, size_t bytes) {
    auto* d = static_cast<uint8_t*>(dst);
    for (size_t i = 0; i < bytes; ++i) d[i] ^= at_ < n_ ? p_[at_++] : 0;
  }
  const int world, self;
  const bool rejected;

 private:
  const uint8_t* p_;
  size_t n_;
  size_t at_ = 0;
};

void fuzzDescriptors(uint8_t shape, const uint8_t* p, size_t n) {
  if (shape & 0x80) return fuzzSummaries(shape, p, n);
  Shape in(shape, p, n);
  const int world = in.world, self = in.self;
  const bool rejected = in.rejected;
  auto take = [&in](void* dst, size_t bytes) { in.take(dst, bytes); };
  CallDescriptor mine = validCall(1, 1000, 5, static_cast<uint32_t>(world));
  if (rejected) mine.kind = terse::detail::kRejectedKind;
  take(&mine, sizeof mine);
  std::vector<CallDescriptor> theirs(world, mine);
  std::vector<size_t> got(world, sizeof(CallDescriptor));
  for (int i = 0; i < world; ++i) {
    if (i == self) continue;
    uint8_t size = 0;
    take(&size, 1);
    if (size >= 0xc0) got[i] = size - 0xc0u;
    take(&theirs[i], sizeof(CallDescriptor));
  }
  // Step 1, in rank order as the descriptors are waited for.
  int firstBad = -1;
  for (int i = 0; i < world && firstBad < 0; ++i)
    if (i != self &&
        (got[i] != sizeof(CallDescriptor) || theirs[i].magic != terse::detail::kDescriptorMagic))
      firstBad = i;
  for (int i = 0; i < world; ++i) {
    if (i == self) continue;
    Status st = terse::detail::checkReceivedDescriptor(terse::CollectiveKind::kAllReduce, i,
                                                       theirs[i], got[i]);
    if (firstBad < 0 || i < firstBad) {
      if (!st.isOk()) fail("a whole descriptor with the magic was refused");
    } else if (i == firstBad) {
      if (st.isOk()) fail("a short or foreign descriptor was accepted");
      if (st.code() != StatusCode::kCorrupt || !names(st, i))
        fail("a malformed descriptor's error is not kCorrupt naming its rank");
      return;  // the engine stops here
    }
  }
  // Step 2: agreement. A descriptor of the rejected kind is this rank's rejection, whatever the
  // flag says: the engine sets both together, and the check compares calls, so it accepts a
  // peer's identical rejected call in that state (the all-to-all check once refused it).
  const bool rejectedHere = rejected || mine.kind == terse::detail::kRejectedKind;
  int firstOdd = -1;
  for (int i = 0; i < world && firstOdd < 0; ++i)
    if (i != self && ((theirs[i].kind == terse::detail::kRejectedKind && !rejectedHere) ||
                      !sameCallIndependently(theirs[i], mine)))
      firstOdd = i;
  expectVerdict(
      terse::detail::checkDescriptorsAgree(mine, theirs.data(), world, self, mine.seq, rejected),
      firstOdd);
}

// Shape bit 7 set: large worlds' agreement by a dissemination of summaries. The world's calls
// are valid ones with 32 bytes each XORed in (most stay equal), this rank's rejected when bit 6
// says so; the dissemination is played out for every rank, then the summary this rank receives
// in its last round gets a size byte, 24 bytes of its header and lowest call and 16 of its other
// call XORed in. Checked: the summary is refused exactly when it is short, lacks a magic, has a
// non-zero reserved word or holds ranks outside the world or a firstOther not above lowest
// (kCorrupt naming the sender); an untouched one
// yields the verdict of the plain loop over all calls (kInvalidUsage naming the first rank whose
// call differs from this rank's, or agreement); a touched but accepted one still yields
// agreement or kInvalidUsage naming a rank of the world other than this one.
void fuzzSummaries(uint8_t shape, const uint8_t* p, size_t n) {
  using terse::detail::CallSummary;
  Shape in(shape, p, n);
  const int world = in.world, self = in.self;
  const bool rejected = in.rejected;
  auto take = [&in](void* dst, size_t bytes) { in.take(dst, bytes); };
  std::vector<CallDescriptor> calls(world, validCall(1, 1000, 5, static_cast<uint32_t>(world)));
  if (rejected) calls[self].kind = terse::detail::kRejectedKind;
  for (auto& c : calls) {
    take(&c, 32);
    c.magic = terse::detail::kDescriptorMagic;  // the magic is the received check's business
  }
  std::vector<CallSummary> known(world);
  for (int r = 0; r < world; ++r) known[r] = terse::detail::summarizeCall(r, calls[r]);
  CallSummary last{};
  int lastFrom = -1;
  for (int d = 1; d < world; d *= 2) {
    const std::vector<CallSummary> sent = known;
    for (int r = 0; r < world; ++r) {
      const int from = (r - d + world) % world;
      if (r == self && 2 * d >= world) {
        last = sent[from];  // this rank's last round: the one the input tampers with
        lastFrom = from;
        continue;
      }
      terse::detail::mergeSummaries(&known[r], sent[from]);
    }
  }
  const CallSummary honest = last;
  uint8_t size = 0;
  take(&size, 1);
  const size_t got = size >= 0xc0 ? size - 0xc0u : sizeof(CallSummary);
  take(&last, 24);
  take(&last.otherCall, 16);  // a forged first other rank's call (its magic and kind included)
  const bool whole =
      got == sizeof(CallSummary) && last.magic == terse::detail::kSummaryMagic &&
      last.reserved == 0 && last.lowestCall.magic == terse::detail::kDescriptorMagic &&
      last.lowest >= 0 && last.lowest < world &&
      (last.firstOther == -1 || (last.firstOther > last.lowest && last.firstOther < world &&
                                 last.otherCall.magic == terse::detail::kDescriptorMagic));
  Status st = terse::detail::checkReceivedSummary(terse::CollectiveKind::kAllReduce, lastFrom,
                                                  world, last, got);
  if (!whole) {
    if (st.isOk()) fail("a short or malformed summary was accepted");
    if (st.code() != StatusCode::kCorrupt || !names(st, lastFrom))
      fail("a malformed summary's error is not kCorrupt naming its sender");
    return;
  }
  if (!st.isOk()) fail("a whole summary with the magics and ranks of the world was refused");
  terse::detail::mergeSummaries(&known[self], last);
  Status verdict =
      terse::detail::checkAgreement(calls[self], self, known[self], calls[self].seq, rejected);
  if (std::memcmp(&last, &honest, sizeof last) != 0) {
    if (verdict.isOk()) return;
    bool namesAnother = false;
    for (int i = 0; i < world; ++i) namesAnother |= i != self && names(verdict, i);
    if (verdict.code() != StatusCode::kInvalidUsage || !namesAnother)
      fail("a forged summary's verdict is not agreement or kInvalidUsage naming another rank");
    return;
  }
  int firstOdd = -1;
  for (int i = 0; i < world && firstOdd < 0; ++i)
    if (i != self && !sameCallIndependently(calls[i], calls[self])) firstOdd = i;
  expectVerdict(verdict, firstOdd);
}

// --- rendezvous store values --------------------------------------------------------------

const char kHeader[] = "terse 0.1.0 size 4\n";

bool printable(const std::string& s) {
  for (char c : s)
    if (c < 0x20 || c > 0x7e) return false;
  return true;
}

// Even param: the value under <prefix>/failed; odd: rank (param / 2) % 4's published value.
void fuzzPublished(uint8_t param, const uint8_t* p, size_t n) {
  namespace rd = terse::rendezvous_detail;
  const std::string value(reinterpret_cast<const char*>(p), n);
  if (param % 2 == 0) {
    Status st = rd::parsePublishedFailure(value);
    const int code = static_cast<int>(st.code());
    if (code < static_cast<int>(StatusCode::kInvalidArgument) ||
        code > static_cast<int>(StatusCode::kInternal))
      fail("a published failure became a code that is not an error");
    if (!printable(st.message())) fail("a published failure's text is not printable ASCII");
    if (st.message().size() > 4 * rd::kMaxQuotedBytes + 3)
      fail("a published failure's text is not bounded");
    return;
  }
  const int peer = (param / 2) % 4;
  const std::string header = kHeader;
  std::string payload = "untouched";
  Status st = rd::splitPublishedValue(peer, (peer + 1) % 4, value, header, &payload);
  const bool starts = value.compare(0, header.size(), header) == 0;
  if (st.isOk() != starts) fail("a published value's header check disagrees with its prefix");
  if (st.isOk()) {
    if (header + payload != value) fail("header + payload is not the published value");
    return;
  }
  if (st.code() != StatusCode::kInvalidUsage || !names(st, peer))
    fail("a header mismatch is not kInvalidUsage naming the rank");
  if (!printable(st.message())) fail("a header mismatch quotes bytes unescaped");
}

// --- seeds ---------------------------------------------------------------------------------

std::vector<uint8_t> withHead(uint8_t mode, uint8_t param, const void* bytes, size_t n) {
  std::vector<uint8_t> out = {mode, param};
  const auto* b = static_cast<const uint8_t*>(bytes);
  out.insert(out.end(), b, b + n);
  return out;
}

void writeSeeds(const std::function<void(const std::vector<uint8_t>&)>& put) {
  // Blobs as UcxTransport::init publishes them (addresses of typical and edge sizes).
  const std::string address(std::string("\x04\x00\x91\x7f\x00\x01", 6) + std::string(90, 'a'));
  for (const PeerBlob& b : {PeerBlob{"node-3", 31337, address}, PeerBlob{"", 1, "x"},
                            PeerBlob{"h", 2147483647, std::string(300, '\0')}}) {
    const std::string bytes = terse::encodePeerBlob(b);
    put(withHead(kBlob, 3, bytes.data(), bytes.size()));
  }
  // Notices: an engine's error, one with control bytes and escapes, one over the bound.
  const std::string notices[] = {
      "allreduce #12 failed: the connection to rank 2 broke (UCX: Connection reset by remote "
      "peer); rank 2 probably died",
      std::string("bad\0\x1b[2J\\x41\xff", 13), std::string(700, 'n')};
  for (const std::string& t : notices) put(withHead(kNotice, 0, t.data(), t.size()));
  // Descriptors: all ranks in step (XOR with zeros), a rejected call, a short one, a differing
  // count; worlds of 2 and 4.
  std::vector<uint8_t> zeros(1 + 33 * 9, 0);
  put(withHead(kDescriptors, 0x00, zeros.data(), zeros.size()));
  put(withHead(kDescriptors, 0x02 | (1 << 3), zeros.data(), zeros.size()));
  put(withHead(kDescriptors, 0x40 | 0x01, zeros.data(), zeros.size()));
  std::vector<uint8_t> shortOne = zeros;
  shortOne[32] = 0xc0 + 31;  // the first peer's size byte
  put(withHead(kDescriptors, 0x02, shortOne.data(), shortOne.size()));
  std::vector<uint8_t> odd = zeros;
  odd[32 + 1 + 8] = 1;  // the first peer's count
  put(withHead(kDescriptors, 0x02, odd.data(), odd.size()));
  // Summaries (shape bit 7): worlds of 9 and 5 in step, one with a differing count, one whose
  // last summary is cut short.
  put(withHead(kDescriptors, 0x80 | 0x07, zeros.data(), zeros.size()));
  put(withHead(kDescriptors, 0x80 | 0x03 | (4 << 3), zeros.data(), zeros.size()));
  std::vector<uint8_t> oddSummary = zeros;
  oddSummary[32 * 2 + 8] = 1;  // rank 2's count
  put(withHead(kDescriptors, 0x80 | 0x03, oddSummary.data(), oddSummary.size()));
  std::vector<uint8_t> cut = zeros;
  cut[32 * 5] = 0xc0 + 60;  // the size byte after a world of 5's calls
  put(withHead(kDescriptors, 0x80 | 0x03, cut.data(), cut.size()));
  // Store values: failures as failRendezvous publishes them, a rank's value with the header.
  for (int c = 1; c <= 8; ++c) {
    const std::string f = terse::rendezvous_detail::encodePublishedFailure(
        2, Status(static_cast<StatusCode>(c), "allgather timed out"));
    put(withHead(kPublished, 0, f.data(), f.size()));
  }
  const std::string value = std::string(kHeader) + "ucx worker address\0bytes";
  put(withHead(kPublished, 3, value.data(), value.size()));
  put(withHead(kPublished, 5, "terse 9.9.9 size 4\nx", 20));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  terse::fuzz::maybeWriteSeeds(writeSeeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t param = data[1];
  const uint8_t* p = data + 2;
  const size_t n = size - 2;
  switch (data[0] % kModes) {
    case kBlob: fuzzBlob(param, p, n); break;
    // A bound of 1..256 bytes besides the real one, so inputs reach the cut cheaply.
    case kNotice: fuzzNotice(param == 0 ? terse::kFailureNoticeBytes : param, p, n); break;
    case kDescriptors: fuzzDescriptors(param, p, n); break;
    case kPublished: fuzzPublished(param, p, n); break;
  }
  return 0;
}
