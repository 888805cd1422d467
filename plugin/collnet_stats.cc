#include "collnet_stats.h"

#include "terse/common/status.h"

namespace terse::plugin::collnet {
namespace {

unsigned long long ull(uint64_t v) { return static_cast<unsigned long long>(v); }

std::string kindLine(const std::string& head, const char* name, const CollectiveStats::Kind& k) {
  return formatString(
      "%s%s %llu calls (%llu failed), %llu bytes -> %llu on the wire, %.1f ms (compress %.1f ms, "
      "reduce %.1f ms)",
      head.c_str(), name, ull(k.calls), ull(k.failures), ull(k.rawBytes), ull(k.wireBytes),
      1e3 * k.seconds, 1e3 * k.compressSeconds, 1e3 * k.reduceSeconds);
}

}  // namespace

std::vector<std::string> describeStats(const StatsContext& context, const CollectiveStats& stats,
                                       const CollNetCounters& counters) {
  const std::string head = formatString("rank %d of %d stats: ", context.rank, context.nranks);
  const CollectiveStats::Kind* callers[] = {&stats.allreduce, &stats.reduceScatter,
                                            &stats.allgather};
  const char* names[] = {"allreduce", "reduce-scatter", "allgather"};
  uint64_t calls = 0, failed = 0, raw = 0, wire = stats.autoPolicy.wireBytes;
  for (const CollectiveStats::Kind* k : callers) {
    calls += k->calls;
    failed += k->failures;
    raw += k->rawBytes;
    wire += k->wireBytes;
  }
  std::vector<std::string> lines;
  // The caller's bytes over this rank's sends (collnet_stats.h says why that is not a codec
  // ratio); without any wire bytes (no call, or a world of one) there is nothing to divide.
  const std::string ratio =
      wire > 0
          ? formatString(" (raw/wire %.2f)", static_cast<double>(raw) / static_cast<double>(wire))
          : std::string();
  lines.push_back(formatString(
      "%scodec %s, %llu calls, %llu bytes -> %llu on the wire%s, %llu failed, %llu declined",
      head.c_str(), context.codec.c_str(), ull(calls), ull(raw), ull(wire), ratio.c_str(),
      ull(failed), ull(counters.declined)));
  for (int i = 0; i < 3; ++i)
    if (callers[i]->calls + callers[i]->failures > 0)
      lines.push_back(kindLine(head, names[i], *callers[i]));
  if (stats.autoPolicy.calls + stats.autoPolicy.failures > 0)
    lines.push_back(kindLine(head, "auto's own calibration and measurement", stats.autoPolicy));
  for (const auto& pick : stats.autoPicks)
    lines.push_back(formatString("%sauto picked %s for %llu calls", head.c_str(),
                                 pick.first.c_str(), ull(pick.second)));
  if (context.errorFeedback)
    lines.push_back(formatString(
        "%serror feedback: %llu calls with residuals, %llu without (ran %s), period %s, %llu "
        "learned, %llu resets",
        head.c_str(), ull(counters.withResidual), ull(counters.withoutResidual),
        context.warmupCodec.c_str(), context.period.c_str(), ull(counters.periodsLearned),
        ull(counters.resets)));
  return lines;
}

}  // namespace terse::plugin::collnet
