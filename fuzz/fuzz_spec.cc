// fuzz_spec: the codec spec parser (makeCodec), the auto policy parser (parseAutoSpec), the
// TERSE_FAULT rule parser (parseFaultRules) and the store address parser (parseHostPort) on
// arbitrary strings.
//
// Checked: no crash or UB; an accepted spec's canonical form is accepted again and is a fixed
// point (makeCodec(c->spec())->spec() == c->spec(), as codec.h promises); an accepted codec can
// compress and decompress a small tensor; an accepted auto spec is canonical-stable and every
// candidate it lists is a valid canonical codec spec; accepted fault rules keep their text, stay
// in their documented ranges and parse again, joined, to the same rules, and a refused one is
// kInvalidArgument naming TERSE_FAULT; an accepted host:port has a host and a 1-5 digit port
// and its re-formatted form parses to the same parts.
#include "fuzz_util.h"
#include "terse/compressors/auto_spec.h"
#include "terse/compressors/codec.h"
#include "terse/rendezvous/bootstrap.h"
#include "terse/transport/fault.h"

#include <functional>
#include <string>
#include <vector>

namespace {

const char* const kSeeds[] = {
    "none",
    "fp16",
    "bf16",
    "int8",
    "int8:block=256",
    "int8:block=32,round=stochastic,seed=3",
    "int8:round=nearest",
    "onebit",
    "onebit:block=2048",
    "topk",
    "topk:ratio=0.01",
    "topk:ratio=1",
    "topk:ratio=1e-3",
    "fp8",
    "fp8:format=e5m2,block=64",
    "fp8:format=e4m3,round=stochastic,seed=9",
    "mxfp8",
    "mxfp4:round=stochastic",
    "int4",
    "int4:block=32,round=stochastic,seed=1",
    "auto:max=mxfp4",
    "fp8:format=e3m4",
    "mxfp8:block=64",
    "auto",
    "auto:max=int8",
    "auto:max=onebit",
    "auto:max=topk",
    "auto:max=none",
    "int8:block=0",
    "topk:ratio=-1",
    "int8:block=99999999999999999999",
    // TERSE_FAULT rules and store addresses (the other parsers every input goes through).
    "kill:rank=2:after_sends=17;drop:rank=1:peer=0:phase=gather:after_recvs=4;;",
    "delay:ms=50:count=0:tag=0x40/0xff",
    "kill:phase=descriptor:after_recvs=0x10",
    "127.0.0.1:29500",
    "node-7:80",
    "/tmp/store:1",
};

void writeSeeds(const std::function<void(const std::vector<uint8_t>&)>& put) {
  for (const char* s : kSeeds) put(std::vector<uint8_t>(s, s + std::string(s).size()));
}

void checkCodec(const std::string& spec) {
  auto made = terse::makeCodec(spec);
  if (!made.isOk()) {
    if (made.status().message().empty()) terse::fuzz::fail("makeCodec error without a message");
    return;
  }
  const terse::Codec& c = *made.value();
  const std::string canonical = c.spec();
  auto again = terse::makeCodec(canonical);
  if (!again.isOk()) terse::fuzz::fail("makeCodec rejects its own canonical spec");
  if (again.value()->spec() != canonical) terse::fuzz::fail("canonical spec is not a fixed point");
  if (again.value()->id() != c.id()) terse::fuzz::fail("canonical spec names another codec");

  // The codec must work: compress then decompress 37 elements.
  const size_t n = 37;
  std::vector<float> in(n), out(n);
  for (size_t i = 0; i < n; ++i) in[i] = static_cast<float>(i) * 0.25f - 4.0f;
  std::vector<uint8_t> wire(c.maxWireBytes(n));
  auto written =
      c.compress(in.data(), terse::DataType::kFloat32, n, nullptr, wire.data(), wire.size());
  if (!written.isOk()) terse::fuzz::fail("an accepted codec fails to compress");
  if (written.value() > wire.size()) terse::fuzz::fail("compress wrote more than maxWireBytes");
  if (!c.decompress(wire.data(), written.value(), out.data(), terse::DataType::kFloat32, n).isOk())
    terse::fuzz::fail("an accepted codec cannot decode its own message");
}

void checkAuto(const std::string& spec) {
  if (!terse::isAutoSpec(spec)) return;
  auto parsed = terse::parseAutoSpec(spec);
  if (!parsed.isOk()) return;
  auto again = terse::parseAutoSpec(parsed.value().canonical);
  if (!again.isOk()) terse::fuzz::fail("parseAutoSpec rejects its own canonical form");
  if (again.value().canonical != parsed.value().canonical)
    terse::fuzz::fail("auto canonical form is not a fixed point");
  if (parsed.value().candidates.empty()) terse::fuzz::fail("auto spec allows no codec");
  for (const std::string& cand : parsed.value().candidates) {
    auto c = terse::makeCodec(cand);
    if (!c.isOk() || c.value()->spec() != cand)
      terse::fuzz::fail("auto candidate is not a canonical codec spec");
  }
}

bool sameRule(const terse::FaultRule& a, const terse::FaultRule& b) {
  return a.action == b.action && a.rank == b.rank && a.peer == b.peer && a.onRecv == b.onRecv &&
         a.after == b.after && a.tagMask == b.tagMask && a.tagValue == b.tagValue &&
         a.delayMs == b.delayMs && a.count == b.count && a.text == b.text;
}

void checkFaultRules(const std::string& text) {
  auto rules = terse::parseFaultRules(text);
  if (!rules.isOk()) {
    if (rules.status().code() != terse::StatusCode::kInvalidArgument ||
        rules.status().message().find("TERSE_FAULT rule '") == std::string::npos)
      terse::fuzz::fail("a refused fault rule is not kInvalidArgument naming TERSE_FAULT");
    return;
  }
  std::string joined;
  for (const terse::FaultRule& r : rules.value()) {
    if (r.text.empty() || r.text.find(';') != std::string::npos)
      terse::fuzz::fail("a fault rule's text is empty or holds a ';'");
    if ((r.tagValue & ~r.tagMask) != 0) terse::fuzz::fail("a fault rule matches no tag");
    if (r.rank < -1 || r.rank >= (1 << 24) || r.peer < -1 || r.peer >= (1 << 24))
      terse::fuzz::fail("a fault rule's rank or peer is outside -1..2^24-1");
    if (r.delayMs < 0 || r.delayMs > 3600000) terse::fuzz::fail("a delay outside 0..3600000 ms");
    joined += r.text + ";";
  }
  auto again = terse::parseFaultRules(joined);
  if (!again.isOk() || again.value().size() != rules.value().size())
    terse::fuzz::fail("accepted fault rules, joined again, do not parse");
  for (size_t i = 0; i < again.value().size(); ++i)
    if (!sameRule(again.value()[i], rules.value()[i]))
      terse::fuzz::fail("accepted fault rules, joined again, parse to other rules");
}

void checkHostPort(const std::string& spec) {
  std::string host;
  int port = -1;
  if (!terse::parseHostPort(spec, &host, &port)) return;
  if (host.empty() || host[0] == '/' || host[0] == '.' || port < 0 || port > 99999)
    terse::fuzz::fail("parseHostPort accepted an empty or path-like host or a port of 6 digits");
  std::string host2;
  int port2 = -1;
  if (!terse::parseHostPort(host + ":" + std::to_string(port), &host2, &port2) || host2 != host ||
      port2 != port)
    terse::fuzz::fail("a parsed host:port does not parse again to the same parts");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  terse::fuzz::maybeWriteSeeds(writeSeeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return 0;  // specs are short; long inputs only slow the search down
  std::string spec(reinterpret_cast<const char*>(data), size);
  checkCodec(spec);
  checkAuto(spec);
  checkFaultRules(spec);
  checkHostPort(spec);
  return 0;
}
