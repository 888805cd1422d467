// fuzz_store: the rendezvous TCP store's request parsing and handling, without sockets.
//
// The server reads a fixed request head, validates it, reads key and value, applies the request
// to its map and answers (rendezvous/src/tcp_store_protocol.h; tcp_store.cc's serve() is those
// calls around blocking reads). The input is treated as the byte stream one client sends:
// requests are handled in order until a malformed head (the server drops the client) or the end
// of the stream (a truncated request is never applied).
//
// Checked: no crash, no allocation from an unvalidated length, no UB; each answer parses on the
// client side; a get right after a set returns the value just set; a get of a key never set is
// "not found".
#include "fuzz_util.h"
#include "tcp_store_protocol.h"

#include <functional>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace {

namespace sp = terse::store_protocol;

void appendRequest(std::vector<uint8_t>& out, uint8_t op, const std::string& key,
                   const std::string& value) {
  uint8_t head[sp::kRequestHeadBytes];
  sp::encodeRequestHead(op, static_cast<uint32_t>(key.size()), static_cast<uint32_t>(value.size()),
                        head);
  out.insert(out.end(), head, head + sizeof head);
  out.insert(out.end(), key.begin(), key.end());
  out.insert(out.end(), value.begin(), value.end());
}

void writeSeeds(const std::function<void(const std::vector<uint8_t>&)>& put) {
  // What storeAllGather does: each rank sets its key, then gets everyone's.
  std::vector<uint8_t> s;
  appendRequest(s, sp::kOpSet, "allgather/0", std::string("terse 0.1.0 size=2|addr0", 24));
  appendRequest(s, sp::kOpGet, "allgather/1", "");
  appendRequest(s, sp::kOpSetIfAbsent, "allgather/claim/1", "pid 7 on a");
  appendRequest(s, sp::kOpSetIfAbsent, "allgather/claim/1", "pid 8 on b");
  appendRequest(s, sp::kOpSet, "allgather/1", "terse 0.1.0 size=2|addr1");
  appendRequest(s, sp::kOpGet, "allgather/1", "");
  put(s);
  std::vector<uint8_t> one;
  appendRequest(one, sp::kOpGet, "missing", "");
  put(one);
  std::vector<uint8_t> empty;
  appendRequest(empty, sp::kOpSet, "", "");
  put(empty);
}

void answer(std::map<std::string, std::string>& map, uint8_t op, std::string key, std::string value,
            uint8_t* found, std::string* out) {
  std::string v = sp::applyRequest(map, op, std::move(key), std::move(value), found);
  uint8_t head[sp::kResponseHeadBytes];
  sp::encodeResponseHead(*found, static_cast<uint32_t>(v.size()), head);
  uint8_t f = 0;
  uint32_t len = 0;
  if (!sp::parseResponseHead(head, &f, &len)) terse::fuzz::fail("client rejects a server answer");
  if (f != *found || len != v.size()) terse::fuzz::fail("answer head does not round-trip");
  *out = std::move(v);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  terse::fuzz::maybeWriteSeeds(writeSeeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::map<std::string, std::string> map;
  std::set<std::string> everSet;
  size_t pos = 0;
  while (size - pos >= sp::kRequestHeadBytes) {
    sp::RequestHead req;
    if (!sp::parseRequestHead(data + pos, &req)) {
      if (data[pos] == sp::kOpSet || data[pos] == sp::kOpGet || data[pos] == sp::kOpSetIfAbsent) {
        uint32_t k, v;
        std::memcpy(&k, data + pos + 1, 4);
        std::memcpy(&v, data + pos + 5, 4);
        if (k <= sp::kMaxField && v <= sp::kMaxField)
          terse::fuzz::fail("a well-formed request head was rejected");
      }
      break;  // the server drops this client
    }
    pos += sp::kRequestHeadBytes;
    // The server reads exactly keyLen + valueLen more bytes; fewer means the client hung up.
    if (size - pos < static_cast<size_t>(req.keyLen) + req.valueLen) break;
    std::string key(reinterpret_cast<const char*>(data + pos), req.keyLen);
    pos += req.keyLen;
    std::string value(reinterpret_cast<const char*>(data + pos), req.valueLen);
    pos += req.valueLen;

    uint8_t found = 0;
    std::string out;
    if (req.op == sp::kOpSet) {
      everSet.insert(key);
      answer(map, req.op, key, value, &found, &out);
      if (found != 1 || !out.empty()) terse::fuzz::fail("a set answers other than (1, empty)");
      std::string got;
      answer(map, sp::kOpGet, key, std::string(), &found, &got);
      if (found != 1 || got != value) terse::fuzz::fail("get after set does not return the value");
    } else if (req.op == sp::kOpSetIfAbsent) {
      // Rank claims: the first set-if-absent of a key places its value and answers (0, empty);
      // any later one (or one after a set) answers (1, the value there) and changes nothing.
      const bool existed = everSet.count(key) != 0;
      std::string before = existed ? map[key] : std::string();
      answer(map, req.op, key, value, &found, &out);
      if ((found != 0) != existed)
        terse::fuzz::fail("set-if-absent misjudged whether the key existed");
      if (existed && out != before)
        terse::fuzz::fail("set-if-absent did not answer the value there");
      if (!existed && !out.empty()) terse::fuzz::fail("a placing set-if-absent carries a value");
      everSet.insert(key);
      std::string got;
      answer(map, sp::kOpGet, key, std::string(), &found, &got);
      if (got != (existed ? before : value))
        terse::fuzz::fail("set-if-absent changed an existing value or lost its own");
    } else {
      answer(map, req.op, key, value, &found, &out);
      if ((found != 0) != (everSet.count(key) != 0))
        terse::fuzz::fail("get finds a key that was never set, or misses one that was");
      if (!found && !out.empty()) terse::fuzz::fail("a miss carries a value");
    }
  }
  return 0;
}
