// fuzz_checkpoint: the training example's checkpoint files (examples/train/checkpoint.h), which
// a resumed run reads back: model.bin (decodeModel) and feedback-<r>.bin (decodeFeedback).
//
// Byte 0 picks the file (bit 0) and whether its trailing checksum is re-stamped (bit 1), so
// mutations reach the fields behind the checksum; byte 1 is the loading rank. The rest is the
// file.
//
// Checked besides "no crash / leak / UB": an accepted file re-encodes to exactly its bytes (so
// nothing is read that is not there, and nothing is ignored); an accepted model has a positive
// world size and as many momentum values as parameters; an accepted feedback file belongs to the
// loading rank.
#include "checkpoint.h"
#include "fuzz_util.h"

#include <cstring>
#include <functional>
#include <vector>

namespace {

using terse::ErrorFeedback;
using terse::fuzz::fail;
using terse::train::ModelState;

// The files' trailing checksum: FNV-1a over every byte before it (checkpoint.cc).
void restamp(std::vector<uint8_t>& file) {
  if (file.size() < 8) return;
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < file.size() - 8; ++i) h = (h ^ file[i]) * 0x100000001b3ull;
  std::memcpy(file.data() + file.size() - 8, &h, 8);
}

void fuzzModel(const std::vector<uint8_t>& file) {
  auto got = terse::train::decodeModel(file, "model.bin");
  if (!got.isOk()) {
    if (got.status().message().find("model.bin") == std::string::npos)
      fail("a refused model file's error does not name it");
    return;
  }
  if (got->world <= 0) fail("accepted a model of world size <= 0");
  if (got->params.size() != got->momentum.size()) fail("parameters and momentum differ in size");
  if (terse::train::encodeModel(got.value()) != file) fail("an accepted model does not re-encode");
}

void fuzzFeedback(int rank, const std::vector<uint8_t>& file) {
  auto got = terse::train::decodeFeedback(file, "feedback.bin", rank);
  if (!got.isOk()) {
    if (got.status().message().find("feedback.bin") == std::string::npos)
      fail("a refused feedback file's error does not name it");
    return;
  }
  if (terse::train::encodeFeedback(rank, got.value()) != file)
    fail("an accepted feedback file does not re-encode");
}

void writeSeeds(const std::function<void(const std::vector<uint8_t>&)>& put0) {
  // Each file as is and with the re-stamp bit, so mutations of either kind start from it.
  auto withHead = [](uint8_t mode, uint8_t rank, const std::vector<uint8_t>& file) {
    std::vector<uint8_t> out = {mode, rank};
    out.insert(out.end(), file.begin(), file.end());
    return out;
  };
  auto put = [&](std::vector<uint8_t> seed) {
    put0(seed);
    seed[0] |= 2;
    put0(seed);
  };
  put(withHead(
      0, 0, terse::train::encodeModel(ModelState{42, 4, "onebit", {1.5f, -2.0f}, {0.5f, 0.25f}})));
  put(withHead(0, 0, terse::train::encodeModel(ModelState{0, 1, "", {}, {}})));
  // Feedback files of two codecs, with and without a server chunk, and an empty one.
  std::vector<ErrorFeedback> states;
  for (const char* spec : {"int8", "topk:ratio=0.25"}) {
    auto ef = ErrorFeedback::create(spec, 40);
    if (!ef.isOk()) continue;
    for (size_t k = 0; k < 40; ++k) ef->worker()[k] = 0.5f * static_cast<float>(k);
    states.push_back(std::move(ef).value());
  }
  if (!states.empty()) {
    float* s = states[0].server(2, 0, 20);
    for (size_t k = 0; s != nullptr && k < 20; ++k) s[k] = -1.0f;
  }
  put(withHead(1, 1, terse::train::encodeFeedback(1, states)));
  put(withHead(1, 0, terse::train::encodeFeedback(0, {})));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  terse::fuzz::maybeWriteSeeds(writeSeeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  std::vector<uint8_t> file(data + 2, data + size);
  if (data[0] & 2) restamp(file);
  if (data[0] & 1)
    fuzzFeedback(data[1], file);
  else
    fuzzModel(file);
  return 0;
}
