#include "collnet_residuals.h"

#include "plugin_log.h"

namespace terse::plugin::collnet {

ResidualSequence::ResidualSequence(std::string codec, std::string warmupCodec,
                                   const PeriodSetting& setting, CollNetCounters* counters)
    : codec_(std::move(codec)),
      warmupCodec_(std::move(warmupCodec)),
      sequence_(setting),
      counters_(counters) {}

std::string ResidualSequence::periodText() const {
  if (sequence_.fixed()) return formatString("%zu (TERSE_COLLNET_EF_PERIOD)", sequence_.period());
  if (sequence_.gaveUp()) return "not found";
  if (sequence_.learning()) return "not learned yet";
  return formatString("%zu (learned)", sequence_.period());
}

Result<ResidualSequence::Plan> ResidualSequence::next(Kind kind, size_t count, DataType type) {
  const CallKey key{static_cast<uint8_t>(kind), static_cast<uint8_t>(type), count};
  CallSequence::Decision d = sequence_.next(key);
  switch (d.event) {
    case CallSequence::Event::kNone: break;
    case CallSequence::Event::kLearned:
      ++counters_->periodsLearned;
      COLLNET_INFO(
          "error-feedback period learned: %zu reduce calls per step, after %zu warm-up calls "
          "run with %s; residuals are kept per position from the next call on",
          sequence_.period(), sequence_.warmupCalls(), warmupCodec_.c_str());
      break;
    case CallSequence::Event::kChanged:
      ++counters_->resets;
      warnChanged(d, kind, count, type);
      break;
    case CallSequence::Event::kGaveUp:
      COLLNET_WARN(
          "error-feedback period not found: the last %zu reduce calls did not repeat %zu times "
          "in a row; this communicator stays without residuals and runs %s instead of %s from "
          "now on (set TERSE_COLLNET_EF_PERIOD to the reduce calls per step to force a period, "
          "or auto:warmup=N to watch more calls)",
          sequence_.warmupCalls(), CallSequence::kRepeats, warmupCodec_.c_str(), codec_.c_str());
      break;
  }
  if (!d.residual) {
    ++counters_->withoutResidual;
    return Plan{nullptr, &warmupCodec_};
  }
  ++counters_->withResidual;
  if (d.position >= slots_.size()) slots_.resize(d.position + 1);
  std::unique_ptr<ErrorFeedback>& slot = slots_[d.position];
  if (!slot) {
    TERSE_ASSIGN_OR_RETURN(ErrorFeedback fb, ErrorFeedback::create(codec_, count));
    slot = std::make_unique<ErrorFeedback>(std::move(fb));
  }
  return Plan{slot.get(), &codec_};
}

void ResidualSequence::warnChanged(const CallSequence::Decision& d, Kind kind, size_t count,
                                   DataType type) {
  const char* heldKind = kindName(static_cast<Kind>(d.expected.kind));
  const char* heldType = dataTypeName(static_cast<DataType>(d.expected.type));
  const size_t dropped = slots_.size();
  slots_.clear();  // stale residuals are never applied to another region
  if (sequence_.fixed())
    COLLNET_WARN(
        "error-feedback sequence changed: call %zu of step %llu (TERSE_COLLNET_EF_PERIOD=%zu) "
        "is a %s of %zu %s, but that position held a %s of %zu %s; resetting all %zu residuals "
        "and restarting the sequence at this call",
        d.brokenPosition, static_cast<unsigned long long>(d.brokenStep), sequence_.period(),
        kindName(kind), count, dataTypeName(type), heldKind, static_cast<size_t>(d.expected.count),
        heldType, dropped);
  else
    COLLNET_WARN(
        "error-feedback sequence changed: call %zu of step %llu (learned period) is a %s of "
        "%zu %s, but that position held a %s of %zu %s; dropping all %zu residuals and "
        "learning the period again (calls run with %s meanwhile)",
        d.brokenPosition, static_cast<unsigned long long>(d.brokenStep), kindName(kind), count,
        dataTypeName(type), heldKind, static_cast<size_t>(d.expected.count), heldType, dropped,
        warmupCodec_.c_str());
}

}  // namespace terse::plugin::collnet
