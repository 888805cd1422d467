// The TCP store's frames (private to rendezvous; fuzz/fuzz_store.cc drives them without sockets).
//   request  = op (u8: 1 set, 2 get, 3 set-if-absent) | key length (u32) | value length (u32) | key
//   | value response = found (u8) | value length (u32) | value
// Lengths are little-endian host order (every rank runs on the same kind of machine).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>

namespace terse::store_protocol {

constexpr uint8_t kOpSet = 1;
constexpr uint8_t kOpGet = 2;
constexpr uint8_t kOpSetIfAbsent = 3;
constexpr uint32_t kMaxField = 64u << 20;  // guards both sides against garbage lengths
constexpr size_t kRequestHeadBytes = 9;
constexpr size_t kResponseHeadBytes = 5;

struct RequestHead {
  uint8_t op = 0;
  uint32_t keyLen = 0;
  uint32_t valueLen = 0;
};

// Decodes a request's fixed head; false (drop the client) for an unknown op or a length over
// kMaxField, before anything is allocated for it.
inline bool parseRequestHead(const uint8_t* p, RequestHead* out) {
  RequestHead h;
  h.op = p[0];
  std::memcpy(&h.keyLen, p + 1, 4);
  std::memcpy(&h.valueLen, p + 5, 4);
  if ((h.op != kOpSet && h.op != kOpGet && h.op != kOpSetIfAbsent) || h.keyLen > kMaxField ||
      h.valueLen > kMaxField)
    return false;
  *out = h;
  return true;
}

inline void encodeRequestHead(uint8_t op, uint32_t keyLen, uint32_t valueLen, uint8_t* p) {
  p[0] = op;
  std::memcpy(p + 1, &keyLen, 4);
  std::memcpy(p + 5, &valueLen, 4);
}

// Applies one complete request to the server's map. Returns the value to answer with and sets
// *found (always 1 for a set; whether the key exists for a get; whether it existed before for a
// set-if-absent, which answers with the value it found).
inline std::string applyRequest(std::map<std::string, std::string>& map, uint8_t op,
                                std::string key, std::string value, uint8_t* found) {
  if (op == kOpSet) {
    map[std::move(key)] = std::move(value);
    *found = 1;
    return std::string();
  }
  if (op == kOpSetIfAbsent) {
    auto placed = map.emplace(std::move(key), std::move(value));
    *found = placed.second ? 0 : 1;
    return placed.second ? std::string() : placed.first->second;
  }
  auto it = map.find(key);
  *found = it != map.end();
  return *found ? it->second : std::string();
}

inline void encodeResponseHead(uint8_t found, uint32_t valueLen, uint8_t* p) {
  p[0] = found;
  std::memcpy(p + 1, &valueLen, 4);
}

// The client's check of a response head: false for a length over kMaxField.
inline bool parseResponseHead(const uint8_t* p, uint8_t* found, uint32_t* valueLen) {
  uint32_t len;
  std::memcpy(&len, p + 1, 4);
  if (len > kMaxField) return false;
  *found = p[0];
  *valueLen = len;
  return true;
}

}  // namespace terse::store_protocol
