// CallSequence, the error-feedback period detector of the CollNet plugin, on its own: learned
// periods 1, 2, 7 and 40, a sequence whose start looks shorter than its period, a change in the
// middle of a run, one that never repeats, explicit periods, and the setting's parser.
#include "ef_period.h"

#include <gtest/gtest.h>

#include <vector>

namespace terse::plugin::collnet {
namespace {

using Event = CallSequence::Event;

CallKey key(uint64_t count, uint8_t kind = 0, uint8_t type = 7) {
  return CallKey{kind, type, count};
}

// One training step's calls: `period` keys, all different.
std::vector<CallKey> distinctStep(size_t period, uint64_t base) {
  std::vector<CallKey> s;
  for (size_t i = 0; i < period; ++i)
    s.push_back(key(base + (i * 37) % (period + 11), static_cast<uint8_t>(i % 2),
                    static_cast<uint8_t>(i % 3 == 0 ? 6 : 7)));
  return s;
}

struct Trace {
  size_t learnedAt = 0;  // index of the call that completed learning (0: never)
  size_t changes = 0, learned = 0, gaveUp = 0;
  std::vector<CallSequence::Decision> decisions;
};

Trace feed(CallSequence& seq, const std::vector<CallKey>& step, size_t steps) {
  Trace t;
  size_t i = 0;
  for (size_t s = 0; s < steps; ++s)
    for (const CallKey& k : step) {
      CallSequence::Decision d = seq.next(k);
      if (d.event == Event::kLearned) {
        ++t.learned;
        t.learnedAt = i;
      }
      t.changes += d.event == Event::kChanged;
      t.gaveUp += d.event == Event::kGaveUp;
      t.decisions.push_back(d);
      ++i;
    }
  return t;
}

CallSequence learner(size_t maxWarmup = CallSequence::kDefaultMaxWarmup) {
  PeriodSetting s;
  s.learn = true;
  s.maxWarmup = maxWarmup;
  return CallSequence(s);
}

// TERSE_COLLNET_EF_PERIOD=<period>: given, not learned.
CallSequence givenPeriod(size_t period) {
  PeriodSetting s;
  s.learn = false;
  s.period = period;
  return CallSequence(s);
}

// A clean sequence of period P is learned with the call that completes its third copy; every
// later call uses the residual of its position, and positions follow the steps exactly.
void expectLearnsCleanly(const std::vector<CallKey>& step) {
  const size_t period = step.size();
  CallSequence seq = learner();
  Trace t = feed(seq, step, 50);
  EXPECT_EQ(t.learned, 1u);
  EXPECT_EQ(t.changes, 0u);
  EXPECT_EQ(t.gaveUp, 0u);
  EXPECT_EQ(t.learnedAt, CallSequence::kRepeats * period - 1);
  EXPECT_EQ(seq.period(), period);
  EXPECT_EQ(seq.warmupCalls(), CallSequence::kRepeats * period);
  for (size_t i = 0; i < t.decisions.size(); ++i) {
    const CallSequence::Decision& d = t.decisions[i];
    if (i <= t.learnedAt) {
      EXPECT_FALSE(d.residual) << "warm-up call " << i;
    } else {
      ASSERT_TRUE(d.residual) << "call " << i;
      EXPECT_EQ(d.position, i % period) << "call " << i;
    }
  }
}

TEST(EfPeriod, LearnsPeriodOne) { expectLearnsCleanly({key(4096)}); }

TEST(EfPeriod, LearnsPeriodTwo) { expectLearnsCleanly({key(1000), key(777)}); }

TEST(EfPeriod, LearnsPeriodSevenWithInnerRepeats) {
  // A B A B C A B: its start looks like period 2, and the whole has a border (A B), so the
  // shortest period of the history is 5 for a while before it becomes 7.
  const CallKey a = key(10), b = key(20, 1), c = key(30);
  expectLearnsCleanly({a, b, a, b, c, a, b});
}

TEST(EfPeriod, LearnsPeriodForty) { expectLearnsCleanly(distinctStep(40, 100)); }

TEST(EfPeriod, KindAndTypeArePartOfTheKey) {
  // Same count every call; only the kind (allreduce, reduce-scatter) or the type tells them apart.
  expectLearnsCleanly({key(512, 0, 7), key(512, 1, 7), key(512, 0, 6)});
}

// Two equal buckets then a smaller one: two equal calls are not enough to take period 1.
TEST(EfPeriod, TwoEqualCallsAtTheStartAreLearnedCleanly) {
  expectLearnsCleanly({key(25), key(25), key(10)});
}

// Three equal buckets then a smaller one: after three calls period 1 holds three times, so it is
// taken; the fourth call breaks it (one change), and the real period 4 is learned from the
// step's first call on, without further changes.
TEST(EfPeriod, ARunOfEqualCallsIsRelearnedOnce) {
  const std::vector<CallKey> step = {key(25), key(25), key(25), key(10)};
  CallSequence seq = learner();
  Trace t = feed(seq, step, 40);
  EXPECT_EQ(t.changes, 1u);
  EXPECT_EQ(t.learned, 2u);
  EXPECT_EQ(seq.period(), 4u);
  EXPECT_EQ(seq.resets(), 1u);
  // From the second lock on, positions follow the steps: the call with count 10 is always the
  // same position, and so is each of the 25s.
  size_t tenPosition = SIZE_MAX;
  for (size_t i = t.learnedAt + 1; i < t.decisions.size(); ++i) {
    ASSERT_TRUE(t.decisions[i].residual);
    if (step[i % 4].count == 10) {
      if (tenPosition == SIZE_MAX) tenPosition = t.decisions[i].position;
      EXPECT_EQ(t.decisions[i].position, tenPosition);
    }
  }
  EXPECT_NE(tenPosition, SIZE_MAX);
}

TEST(EfPeriod, AChangeMidRunResetsAndRelearns) {
  CallSequence seq = learner();
  const std::vector<CallKey> before = {key(1000), key(777)};
  Trace t1 = feed(seq, before, 30);
  ASSERT_EQ(t1.learned, 1u);
  ASSERT_EQ(seq.period(), 2u);
  // The model changes: three calls per step of other sizes.
  const std::vector<CallKey> after = {key(500), key(300, 1), key(200)};
  CallSequence::Decision first = seq.next(after[0]);
  EXPECT_EQ(first.event, Event::kChanged);
  EXPECT_FALSE(first.residual);
  EXPECT_EQ(first.brokenPosition, 0u);
  EXPECT_EQ(first.expected, key(1000));
  EXPECT_EQ(first.brokenStep, 27u);  // 30 steps, 3 of them warm-up
  EXPECT_EQ(seq.period(), 0u);
  EXPECT_TRUE(seq.learning());
  // The rest of that step and two more complete three copies of the new step.
  std::vector<CallKey> rest(after.begin() + 1, after.end());
  Trace t2 = feed(seq, rest, 1);
  Trace t3 = feed(seq, after, 2);
  EXPECT_EQ(t2.learned + t3.learned, 1u);
  EXPECT_EQ(t3.learnedAt, 5u);  // the last call of the third copy
  EXPECT_EQ(seq.period(), 3u);
  EXPECT_EQ(seq.resets(), 1u);
  Trace t4 = feed(seq, after, 20);
  EXPECT_EQ(t4.changes, 0u);
  for (size_t i = 0; i < t4.decisions.size(); ++i) {
    ASSERT_TRUE(t4.decisions[i].residual);
    EXPECT_EQ(t4.decisions[i].position, i % 3);
  }
}

TEST(EfPeriod, ABreakInsideAStepKeepsThatStepsEarlierCalls) {
  CallSequence seq = learner();
  feed(seq, {key(1), key(2), key(3)}, 10);
  ASSERT_EQ(seq.period(), 3u);
  // The third call of a step changes size; the step's first two calls are kept as history.
  CallSequence::Decision d;
  (void)seq.next(key(1));
  (void)seq.next(key(2));
  d = seq.next(key(4));
  EXPECT_EQ(d.event, Event::kChanged);
  EXPECT_EQ(d.brokenPosition, 2u);
  EXPECT_EQ(d.expected, key(3));
  EXPECT_EQ(seq.warmupCalls(), 3u);
  Trace t = feed(seq, {key(1), key(2), key(4)}, 2);
  EXPECT_EQ(t.learned, 1u);
  EXPECT_EQ(t.learnedAt, 5u);
  EXPECT_EQ(seq.period(), 3u);
}

TEST(EfPeriod, ASequenceThatNeverRepeatsGivesUpOnce) {
  for (size_t bound : {size_t{100}, CallSequence::kDefaultMaxWarmup}) {
    CallSequence seq = learner(bound);
    size_t gaveUp = 0, residuals = 0, other = 0;
    for (size_t i = 0; i < bound + 1000; ++i) {
      CallSequence::Decision d = seq.next(key(i + 1));
      if (d.event == Event::kGaveUp) {
        ++gaveUp;
        EXPECT_EQ(i + 1, bound) << "gave up at the bound";
      } else if (d.event != Event::kNone) {
        ++other;
      }
      residuals += d.residual;
    }
    EXPECT_EQ(gaveUp, 1u) << "bound " << bound;
    EXPECT_EQ(other, 0u);
    EXPECT_EQ(residuals, 0u);
    EXPECT_TRUE(seq.gaveUp());
    EXPECT_EQ(seq.warmupCalls(), bound);
    // Even a sequence that starts repeating afterwards stays without residuals.
    for (int i = 0; i < 50; ++i) EXPECT_FALSE(seq.next(key(7)).residual);
  }
}

TEST(EfPeriod, APeriodLongerThanTheBoundAllowsIsNotFound) {
  CallSequence seq = learner(100);  // periods up to 33
  Trace t = feed(seq, distinctStep(34, 5), 5);
  EXPECT_EQ(t.learned, 0u);
  EXPECT_EQ(t.gaveUp, 1u);
  CallSequence ok = learner(102);  // 3 x 34
  Trace t2 = feed(ok, distinctStep(34, 5), 5);
  EXPECT_EQ(t2.learned, 1u);
  EXPECT_EQ(ok.period(), 34u);
}

TEST(EfPeriod, ExplicitPeriodUsesResidualsFromTheFirstCall) {
  CallSequence seq = givenPeriod(2);
  Trace t = feed(seq, {key(1000), key(777)}, 10);
  EXPECT_EQ(t.learned, 0u);
  EXPECT_EQ(t.changes, 0u);
  for (size_t i = 0; i < t.decisions.size(); ++i) {
    ASSERT_TRUE(t.decisions[i].residual);
    EXPECT_EQ(t.decisions[i].position, i % 2);
  }
  // A different call at position 0: a change, and that call becomes position 0 of a new
  // sequence with the same period.
  CallSequence::Decision d = seq.next(key(500));
  EXPECT_EQ(d.event, Event::kChanged);
  EXPECT_TRUE(d.residual);
  EXPECT_EQ(d.position, 0u);
  EXPECT_EQ(d.brokenStep, 10u);
  EXPECT_EQ(d.expected, key(1000));
  d = seq.next(key(777));
  EXPECT_EQ(d.event, Event::kNone);
  EXPECT_EQ(d.position, 1u);
  EXPECT_EQ(seq.period(), 2u);
  EXPECT_EQ(seq.resets(), 1u);
}

TEST(EfPeriod, ExplicitZeroIsOff) {
  CallSequence seq = givenPeriod(0);
  Trace t = feed(seq, {key(1)}, 20);
  for (const auto& d : t.decisions) EXPECT_FALSE(d.residual);
  EXPECT_EQ(t.learned + t.changes + t.gaveUp, 0u);
}

TEST(EfPeriod, ParsesTheSetting) {
  for (const char* v : {"", "auto"}) {
    auto s = parsePeriodSetting(v);
    ASSERT_TRUE(s.isOk()) << v;
    EXPECT_TRUE(s->learn);
    EXPECT_EQ(s->maxWarmup, CallSequence::kDefaultMaxWarmup);
  }
  auto w = parsePeriodSetting("auto:warmup=300");
  ASSERT_TRUE(w.isOk());
  EXPECT_TRUE(w->learn);
  EXPECT_EQ(w->maxWarmup, 300u);
  auto p = parsePeriodSetting("12");
  ASSERT_TRUE(p.isOk());
  EXPECT_FALSE(p->learn);
  EXPECT_EQ(p->period, 12u);
  auto z = parsePeriodSetting("0");
  ASSERT_TRUE(z.isOk());
  EXPECT_FALSE(z->learn);
  EXPECT_EQ(z->period, 0u);
  for (const char* bad : {"-1", "abc", "12x", " 12", "auto:", "auto:warmup=", "auto:warmup=2",
                          "auto:warmup=99999999999", "auto:max=3", "AUTO", "1e3"}) {
    auto b = parsePeriodSetting(bad);
    ASSERT_FALSE(b.isOk()) << bad;
    EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(b.status().message().find("TERSE_COLLNET_EF_PERIOD"), std::string::npos) << bad;
  }
}

}  // namespace
}  // namespace terse::plugin::collnet
