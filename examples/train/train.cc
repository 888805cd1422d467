// terse-train: data-parallel training of a small classifier on terse's compressed allreduce.
//
//   terse-run -n 4 -- terse-train --model mlp --codec topk:ratio=0.01 --log run.json
//
// Every rank builds the same synthetic dataset and model (same seeds), takes its own shard of
// each global batch, computes the mean cross-entropy gradient, and averages it with
// Communicator::allreduce(kAvg) under the chosen codec and one ErrorFeedback object per
// parameter tensor (or one for the fused bucket). SGD with momentum and a cosine learning rate
// then applies the (bit-identical on every rank) averaged gradient. See docs/convergence.md.
//
// --optimizer adamw replaces SGD with AdamW (terse::OneBitAdam with a lossless momentum path
// that never leaves warm-up) on the gradients averaged as above; --optimizer onebit-adam sends
// no gradients at all: OneBitAdam averages them during --warmup steps, then allreduces its
// momentum with --codec and error feedback (docs/optim.md).
//
// --shrink-on-failure (under terse-run --keep-going --store <dir>): when a step fails because a
// rank died, the survivors shrink the communicator, agree on the last step they all completed,
// and go on at the smaller world (docs/convergence.md, "Training through a kill").
#include "checkpoint.h"
#include "model.h"

#include "terse/collectives/partition.h"
#include "terse/common/env.h"
#include "terse/optim/onebit_adam.h"

#include <terse/terse.h>

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <memory>
#include <string>
#include <sys/stat.h>
#include <type_traits>
#include <vector>

namespace terse::train {
namespace {

struct Options {
  std::string model = "mlp";
  std::string codec = "none";
  bool feedback = true;  // error feedback for every compressing codec unless --no-ef
  bool fused = true;     // one bucket for all parameters (else one allreduce per tensor)
  Split split = Split::kIid;
  size_t epochs = 8, batch = 128, hidden = 32;
  double lr = 0.1, momentum = 0.8;
  std::string optimizer = "sgd";  // sgd | adamw | onebit-adam
  uint64_t warmup = 100;          // onebit-adam: steps before the variance freezes
  double weightDecay = 0.01;      // adamw, onebit-adam
  uint64_t seed = 1;
  DatasetConfig data;
  std::string log, checkpointDir, resumeDir;
  uint64_t checkpointAt = 0, stopAt = 0;
  bool quiet = false;
  bool shrinkOnFailure = false;
};

void usage(FILE* out) {
  std::fprintf(
      out,
      "usage: terse-run -n N -- terse-train [options]\n"
      "  --model softmax|mlp       model (default mlp)\n"
      "  --hidden H                MLP hidden width (default 32)\n"
      "  --codec SPEC              none, fp16, bf16, int8, onebit, topk:ratio=0.01, ...\n"
      "  --no-ef                   no error feedback (residuals dropped)\n"
      "  --bucket fused|tensor     one allreduce for all parameters, or one per tensor\n"
      "  --split iid|noniid        how ranks share the data (default iid)\n"
      "  --epochs E --batch B      schedule; B is the global batch, a multiple of N\n"
      "  --lr LR --momentum MU     SGD with momentum, cosine-decayed learning rate\n"
      "  --optimizer sgd|adamw|onebit-adam   adamw: AdamW on the averaged gradients;\n"
      "                            onebit-adam: OneBitAdam, --codec compresses the momentum\n"
      "  --warmup STEPS            onebit-adam: uncompressed warm-up steps (default 100; 0: "
      "decided from the variance, docs/optim.md)\n"
      "  --weight-decay WD         adamw, onebit-adam: decoupled weight decay (0.01)\n"
      "  --seed S                  data, initialisation and shuffling seed\n"
      "  --train-size N --test-size N --features D --classes K\n"
      "  --center-scale S --noise S --label-noise P   shape of the synthetic mixture\n"
      "  --feature-spread S        features scaled from 1 down to 1/S (default 1: all alike)\n"
      "  --log FILE                JSON log (written by rank 0)\n"
      "  --checkpoint DIR          save model and error feedback into DIR ...\n"
      "  --checkpoint-at STEP      ... after this many steps (default: at the end)\n"
      "  --stop-at STEP            stop after this many steps (simulated interruption)\n"
      "  --resume DIR              continue from a checkpoint (any world size)\n"
      "  --quiet                   no per-epoch lines\n"
      "  --shrink-on-failure       when a rank dies, the survivors shrink the communicator,\n"
      "                            go back to the last step they all completed and go on\n"
      "                            (run under terse-run --keep-going --store DIR; --batch\n"
      "                            must divide by every world size it may shrink to)\n");
}

bool parseOptions(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char** out) {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "terse-train: %s needs a value\n", a.c_str());
        return false;
      }
      *out = argv[++i];
      return true;
    };
    auto number = [&](auto* out) {
      const char* v = nullptr;
      if (!value(&v)) return false;
      char* end = nullptr;
      double d = std::strtod(v, &end);
      if (!*v || *end || !std::isfinite(d) || d < 0) {
        std::fprintf(stderr, "terse-train: %s wants a non-negative number, got '%s'\n", a.c_str(),
                     v);
        return false;
      }
      *out = static_cast<std::remove_pointer_t<decltype(out)>>(d);
      return true;
    };
    const char* v = nullptr;
    if (a == "-h" || a == "--help") {
      usage(stdout);
      std::exit(0);
    } else if (a == "--model") {
      if (!value(&v)) return false;
      o->model = v;
      if (!Model::validKind(o->model)) {
        std::fprintf(stderr, "terse-train: --model must be softmax or mlp, got '%s'\n", v);
        return false;
      }
    } else if (a == "--codec") {
      if (!value(&v)) return false;
      o->codec = v;
    } else if (a == "--no-ef") {
      o->feedback = false;
    } else if (a == "--bucket") {
      if (!value(&v)) return false;
      if (std::strcmp(v, "fused") && std::strcmp(v, "tensor")) {
        std::fprintf(stderr, "terse-train: --bucket must be fused or tensor, got '%s'\n", v);
        return false;
      }
      o->fused = std::strcmp(v, "fused") == 0;
    } else if (a == "--split") {
      if (!value(&v)) return false;
      if (std::strcmp(v, "iid") && std::strcmp(v, "noniid")) {
        std::fprintf(stderr, "terse-train: --split must be iid or noniid, got '%s'\n", v);
        return false;
      }
      o->split = std::strcmp(v, "iid") == 0 ? Split::kIid : Split::kNonIid;
    } else if (a == "--epochs") {
      if (!number(&o->epochs)) return false;
    } else if (a == "--batch") {
      if (!number(&o->batch)) return false;
    } else if (a == "--hidden") {
      if (!number(&o->hidden)) return false;
    } else if (a == "--lr") {
      if (!number(&o->lr)) return false;
    } else if (a == "--optimizer") {
      if (!value(&v)) return false;
      o->optimizer = v;
      if (o->optimizer != "sgd" && o->optimizer != "adamw" && o->optimizer != "onebit-adam") {
        std::fprintf(stderr,
                     "terse-train: --optimizer must be sgd, adamw or onebit-adam, got '%s'\n", v);
        return false;
      }
    } else if (a == "--warmup") {
      if (!number(&o->warmup)) return false;
    } else if (a == "--weight-decay") {
      if (!number(&o->weightDecay)) return false;
    } else if (a == "--momentum") {
      if (!number(&o->momentum)) return false;
    } else if (a == "--seed") {
      if (!number(&o->seed)) return false;
    } else if (a == "--train-size") {
      if (!number(&o->data.trainSize)) return false;
    } else if (a == "--test-size") {
      if (!number(&o->data.testSize)) return false;
    } else if (a == "--features") {
      if (!number(&o->data.features)) return false;
    } else if (a == "--classes") {
      if (!number(&o->data.classes)) return false;
    } else if (a == "--center-scale") {
      if (!number(&o->data.centerScale)) return false;
    } else if (a == "--noise") {
      if (!number(&o->data.noise)) return false;
    } else if (a == "--label-noise") {
      if (!number(&o->data.labelNoise)) return false;
    } else if (a == "--feature-spread") {
      if (!number(&o->data.featureSpread)) return false;
      if (o->data.featureSpread < 1) {
        std::fprintf(stderr, "terse-train: --feature-spread wants a number >= 1, got %g\n",
                     o->data.featureSpread);
        return false;
      }
    } else if (a == "--log") {
      if (!value(&v)) return false;
      o->log = v;
    } else if (a == "--checkpoint") {
      if (!value(&v)) return false;
      o->checkpointDir = v;
    } else if (a == "--checkpoint-at") {
      if (!number(&o->checkpointAt)) return false;
    } else if (a == "--stop-at") {
      if (!number(&o->stopAt)) return false;
    } else if (a == "--resume") {
      if (!value(&v)) return false;
      o->resumeDir = v;
    } else if (a == "--quiet") {
      o->quiet = true;
    } else if (a == "--shrink-on-failure") {
      o->shrinkOnFailure = true;
    } else {
      std::fprintf(stderr, "terse-train: unknown option '%s' (see --help)\n", a.c_str());
      return false;
    }
  }
  if (o->data.features == 0 || o->data.classes < 2 || o->batch == 0 || o->epochs == 0 ||
      (o->model == "mlp" && o->hidden == 0) || o->data.trainSize < o->batch || o->momentum >= 1) {
    std::fprintf(stderr,
                 "terse-train: need features >= 1, classes >= 2, hidden >= 1, momentum < 1, "
                 "epochs >= 1 and a training set at least one batch large\n");
    return false;
  }
  o->data.seed = o->seed;
  return true;
}

struct StepRecord {
  uint64_t step;
  float loss, acc;
};
struct EpochRecord {
  uint64_t epoch, step;
  float trainLoss, trainAcc, testLoss, testAcc;
};
// --shrink-on-failure: the step the survivors went on from, the new world and who was gone.
struct ShrinkRecord {
  uint64_t step;
  int world;
  std::vector<int> gone;
};

// Loss and accuracy over a whole set: each rank evaluates a contiguous 1/world of the rows and
// the sums are allreduced uncompressed.
Status evaluate(Communicator& comm, const Model& model, const Dataset& data, float* loss,
                float* acc) {
  Range part = chunkRange(data.size(), comm.size(), comm.rank());
  std::vector<size_t> rows(part.length);
  for (size_t i = 0; i < part.length; ++i) rows[i] = part.begin + i;
  size_t correct = 0;
  double mean = model.lossAndGradient(data, rows, nullptr, &correct);
  float sums[2] = {static_cast<float>(mean * static_cast<double>(part.length)),
                   static_cast<float>(correct)};
  TERSE_RETURN_IF_ERROR(comm.allreduce(sums, sums, 2, DataType::kFloat32, ReduceOp::kSum));
  *loss = sums[0] / static_cast<float>(data.size());
  *acc = sums[1] / static_cast<float>(data.size());
  return Status::ok();
}

Status writeLog(const Options& o, const std::string& codec, bool feedback, int world, size_t params,
                uint64_t startStep, uint64_t totalSteps, const std::vector<StepRecord>& steps,
                const std::vector<EpochRecord>& epochs, uint64_t bytesSent,
                const std::vector<ShrinkRecord>& shrinks) {
  FILE* f = std::fopen(o.log.c_str(), "w");
  if (!f) return errorSystem("cannot write the log '%s': %s", o.log.c_str(), std::strerror(errno));
  std::fprintf(f,
               "{\n  \"config\": {\"model\": \"%s\", \"optimizer\": \"%s\", \"codec\": \"%s\", "
               "\"error_feedback\": %s, "
               "\"bucket\": \"%s\", \"split\": \"%s\", \"world\": %d, \"parameters\": %zu, "
               "\"epochs\": %zu, \"batch\": %zu, \"lr\": %g, \"momentum\": %g, \"seed\": %llu, "
               "\"train_size\": %zu, \"test_size\": %zu},\n",
               o.model.c_str(), o.optimizer.c_str(), codec.c_str(), feedback ? "true" : "false",
               o.fused ? "fused" : "tensor", o.split == Split::kIid ? "iid" : "noniid", world,
               params, o.epochs, o.batch, o.lr, o.momentum, static_cast<unsigned long long>(o.seed),
               o.data.trainSize, o.data.testSize);
  std::fprintf(f, "  \"start_step\": %llu, \"total_steps\": %llu, \"bytes_sent_rank0\": %llu,\n",
               static_cast<unsigned long long>(startStep),
               static_cast<unsigned long long>(totalSteps),
               static_cast<unsigned long long>(bytesSent));
  std::fprintf(f, "  \"shrinks\": [");
  for (size_t i = 0; i < shrinks.size(); ++i) {
    std::string gone;
    for (int r : shrinks[i].gone) gone += (gone.empty() ? "" : ", ") + std::to_string(r);
    std::fprintf(f, "%s\n    {\"step\": %llu, \"world\": %d, \"gone\": [%s]}", i ? "," : "",
                 static_cast<unsigned long long>(shrinks[i].step), shrinks[i].world, gone.c_str());
  }
  std::fprintf(f, "%s],\n  \"steps\": [", shrinks.empty() ? "" : "\n  ");
  for (size_t i = 0; i < steps.size(); ++i)
    std::fprintf(f, "%s\n    [%llu, %.9g, %.9g]", i ? "," : "",
                 static_cast<unsigned long long>(steps[i].step), steps[i].loss, steps[i].acc);
  std::fprintf(f, "\n  ],\n  \"epochs\": [");
  for (size_t i = 0; i < epochs.size(); ++i) {
    const EpochRecord& e = epochs[i];
    std::fprintf(f,
                 "%s\n    {\"epoch\": %llu, \"step\": %llu, \"train_loss\": %.9g, \"train_acc\": "
                 "%.9g, \"test_loss\": %.9g, \"test_acc\": %.9g}",
                 i ? "," : "", static_cast<unsigned long long>(e.epoch),
                 static_cast<unsigned long long>(e.step), e.trainLoss, e.trainAcc, e.testLoss,
                 e.testAcc);
  }
  std::fprintf(f, "\n  ]\n}\n");
  bool ok = std::ferror(f) == 0;
  ok = std::fclose(f) == 0 && ok;
  if (!ok) return errorSystem("writing the log '%s' failed", o.log.c_str());
  return Status::ok();
}

// OneBitAdam's per-rank checkpoint file (OneBitAdam::serialize(), which carries its own
// version and checksum), written under a temporary name and renamed like the other files.
std::string adamPath(const std::string& dir, int rank) {
  return dir + "/adam-" + std::to_string(rank) + ".bin";
}

Status saveAdam(const std::string& dir, int rank, const OneBitAdam& adam) {
  std::vector<uint8_t> bytes = adam.serialize();
  std::string path = adamPath(dir, rank), tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return errorSystem("cannot write '%s': %s", tmp.c_str(), std::strerror(errno));
  bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  ok = std::fclose(f) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0)
    return errorSystem("writing '%s' failed", path.c_str());
  return Status::ok();
}

Result<OneBitAdam> loadAdam(const std::string& dir, int rank) {
  std::string path = adamPath(dir, rank);
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return errorInvalidArgument(
        "checkpoint has no optimizer state '%s' (saved with another "
        "--optimizer?)",
        path.c_str());
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  auto adam = OneBitAdam::deserialize(bytes.data(), bytes.size());
  if (!adam.isOk()) return adam.status().withContext(path);
  return adam;
}

// CLOCK_MONOTONIC seconds: one clock for every process of the host, so a test driver can
// subtract the time it killed a rank from the time a survivor completed its next step.
double monotonicSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// FNV-1a over the parameters' bits: survivors that must hold identical weights print it.
uint64_t weightsHash(const std::vector<float>& w) {
  uint64_t h = 1469598103934665603ull;
  for (float v : w) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    h = (h ^ bits) * 1099511628211ull;
  }
  return h;
}

// What a rank needs to go back to the start of a step (--shrink-on-failure).
struct StepState {
  std::vector<float> params, momentum;
  std::vector<ErrorFeedback> feedback;
  std::vector<uint8_t> adam;  // OneBitAdam::serialize()
  size_t stepRecords = 0, epochRecords = 0;
};

// A test hook: each named rank (of the world at start) prints "halting before step <step> (pid
// <pid>)" and stops itself (SIGSTOP) between two steps, for a driver to SIGKILL it there: a kill
// between calls at a step the driver chose (two ranks at the same step: two deaths at once).
const EnvSetting kTrainHaltSetting{
    {"TERSE_TRAIN_HALT", "string", "",
     "terse-train with --shrink-on-failure, a test hook: <rank>:<step>[,<rank>:<step>...] makes "
     "each named rank stop itself (SIGSTOP) before that step, for a test driver to SIGKILL it "
     "there (tests/train/shrink_test.py)."}};

// Returns the step this rank halts before (kTrainHaltSetting), or none.
Result<std::optional<uint64_t>> haltFromEnv(int rank) {
  std::optional<uint64_t> mine;
  TERSE_ASSIGN_OR_RETURN(const std::string text, kTrainHaltSetting.readText());
  if (text.empty()) return mine;
  const char* v = text.c_str();
  for (const char* p = v;;) {
    unsigned long long step = 0;
    int r = -1, used = 0;
    if (std::sscanf(p, "%d:%llu%n", &r, &step, &used) != 2 || r < 0 ||
        (p[used] != '\0' && p[used] != ','))
      return errorInvalidArgument(
          "TERSE_TRAIN_HALT wants <rank>:<step>[,<rank>:<step>...], got '%s'", v);
    if (r == rank) mine = step;
    if (p[used] == '\0') return mine;
    p += used + 1;
  }
}

Status run(const Options& o) {
  TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, Communicator::createFromEnv());
  int rank = comm->rank(), world = comm->size();
  if (o.batch % static_cast<size_t>(world) != 0)
    return errorInvalidArgument(
        "the global batch %zu is not a multiple of the world size %d: pick "
        "--batch divisible by -n",
        o.batch, world);
  TERSE_ASSIGN_OR_RETURN(const std::optional<uint64_t> haltAt, haltFromEnv(rank));

  Dataset train, test;
  makeDatasets(o.data, &train, &test);
  Model model(o.model, o.data.features, o.hidden, o.data.classes, o.seed);
  const size_t count = model.parameterCount();
  std::vector<float> grad(count), momentum(count, 0.0f);
  std::vector<Tensor> buckets =
      o.fused ? std::vector<Tensor>{Tensor{"all", 0, count}} : model.tensors();

  // Error feedback for every compressing codec unless --no-ef; "none" needs none.
  TERSE_ASSIGN_OR_RETURN(ErrorFeedback probe, ErrorFeedback::create(o.codec, 1));
  const std::string codec = probe.codecSpec();
  // onebit-adam sends no gradients: the codec compresses OneBitAdam's momentum instead.
  const bool momentumPath = o.optimizer == "onebit-adam";
  const bool useFeedback = o.feedback && codec != "none" && !momentumPath;
  std::optional<OneBitAdam> adam;
  if (o.optimizer != "sgd") {
    OneBitAdamOptions ao;
    ao.weightDecay = static_cast<float>(o.weightDecay);
    if (momentumPath) {
      ao.codec = codec;
      ao.warmupSteps = static_cast<int64_t>(o.warmup);
      ao.averageGradients = true;
    } else {
      // AdamW: gradients averaged by the allreduce below; the variance never freezes.
      ao.codec = "none";
      ao.warmupSteps = std::numeric_limits<int64_t>::max();
      ao.averageGradients = false;
    }
    TERSE_ASSIGN_OR_RETURN(OneBitAdam made, OneBitAdam::create(count, ao));
    adam.emplace(std::move(made));
  }
  std::vector<ErrorFeedback> feedback;
  if (useFeedback)
    for (const Tensor& t : buckets) {
      TERSE_ASSIGN_OR_RETURN(ErrorFeedback ef, ErrorFeedback::create(codec, t.length));
      feedback.push_back(std::move(ef));
    }

  const uint64_t perEpoch = stepsPerEpoch(train.size(), o.batch);
  const uint64_t totalSteps = perEpoch * o.epochs;
  uint64_t step = 0;
  if (!o.resumeDir.empty()) {
    TERSE_ASSIGN_OR_RETURN(ModelState saved, loadModel(o.resumeDir));
    if (saved.params.size() != count)
      return errorInvalidArgument(
          "checkpoint '%s' holds %zu parameters, this model has %zu: resume "
          "with the same --model/--hidden/--features/--classes",
          o.resumeDir.c_str(), saved.params.size(), count);
    if (saved.codec != (useFeedback ? codec : std::string()))
      return errorInvalidArgument(
          "checkpoint '%s' has error feedback for codec '%s', this run uses "
          "'%s'%s: resume with the codec (and --no-ef) it was saved with",
          o.resumeDir.c_str(), saved.codec.c_str(), codec.c_str(),
          useFeedback ? " with feedback" : " without feedback");
    model.params() = saved.params;
    momentum = saved.momentum;
    step = saved.step;
    if (adam) {
      // Moments are the same on every rank, so any file has them; the residuals are per rank:
      // this rank's own at the same world size, else every old rank's re-partitioned.
      TERSE_ASSIGN_OR_RETURN(OneBitAdam loaded,
                             loadAdam(o.resumeDir, saved.world == world ? rank : 0));
      if (loaded.count() != count || loaded.options().codec != adam->options().codec ||
          loaded.steps() != static_cast<int64_t>(step))
        return errorInvalidArgument(
            "checkpoint '%s': its optimizer state (%zu elements, codec '%s', step %lld) does not "
            "fit this run (%zu, '%s', step %llu): resume with the same --optimizer and --codec",
            o.resumeDir.c_str(), loaded.count(), loaded.options().codec.c_str(),
            static_cast<long long>(loaded.steps()), count, adam->options().codec.c_str(),
            static_cast<unsigned long long>(step));
      if (saved.world != world) {
        std::vector<OneBitAdam> old;
        for (int r = 0; r < saved.world; ++r) {
          TERSE_ASSIGN_OR_RETURN(OneBitAdam one, loadAdam(o.resumeDir, r));
          old.push_back(std::move(one));
        }
        std::vector<const ErrorFeedback*> residuals;
        for (const OneBitAdam& one : old) residuals.push_back(&one.feedback());
        TERSE_ASSIGN_OR_RETURN(ErrorFeedback mine, repartitionFeedback(residuals, world, rank));
        TERSE_RETURN_IF_ERROR(loaded.replaceFeedback(std::move(mine)));
      }
      adam = std::move(loaded);
    }
    if (useFeedback) {
      TERSE_ASSIGN_OR_RETURN(feedback, loadFeedback(o.resumeDir, saved.world, world, rank));
      if (feedback.size() != buckets.size())
        return errorInvalidArgument(
            "checkpoint '%s' has %zu error-feedback objects, this run needs "
            "%zu: resume with the same --bucket",
            o.resumeDir.c_str(), feedback.size(), buckets.size());
      for (size_t b = 0; b < buckets.size(); ++b)
        TERSE_RETURN_IF_ERROR(feedback[b].checkCompatible(codec, buckets[b].length));
    }
    if (rank == 0 && !o.quiet)
      std::printf("resumed at step %llu from '%s' (saved by %d ranks, now %d)\n",
                  static_cast<unsigned long long>(step), o.resumeDir.c_str(), saved.world, world);
  }
  if (rank == 0 && !o.quiet)
    std::printf(
        "model %s (%zu parameters), optimizer %s, codec %s, error feedback %s, %zu "
        "bucket(s), %d ranks\n",
        o.model.c_str(), count, o.optimizer.c_str(), codec.c_str(),
        useFeedback ? "on" : (momentumPath ? "on the momentum" : "off"), buckets.size(), world);
  if (o.shrinkOnFailure) {
    // Every rank, even with --quiet: a driver that kills ranks needs their pids.
    std::printf("rank %d of %d: pid %d, shrinking on failure\n", rank, world,
                static_cast<int>(::getpid()));
    std::fflush(stdout);
  }

  const uint64_t startStep = step;
  const uint64_t checkpointAt =
      o.checkpointAt ? o.checkpointAt : (o.stopAt ? o.stopAt : totalSteps);
  const uint64_t endStep = o.stopAt ? std::min<uint64_t>(o.stopAt, totalSteps) : totalSteps;
  std::vector<StepRecord> steps;
  std::vector<EpochRecord> epochs;
  std::vector<ShrinkRecord> shrinks;

  // One step: every call of it (gradients, statistics, the epoch's evaluation, a checkpoint's
  // barrier) must succeed for the step to count; `step` moves on only then.
  auto oneStep = [&]() -> Status {
    const uint64_t epoch = step / perEpoch;
    std::vector<size_t> rows =
        batchRows(train, o.split, o.seed, epoch, step % perEpoch, o.batch, rank, world);
    size_t correct = 0;
    double loss = model.lossAndGradient(train, rows, grad.data(), &correct);
    for (size_t b = 0; b < buckets.size() && !momentumPath; ++b) {
      float* g = grad.data() + buckets[b].offset;
      TERSE_RETURN_IF_ERROR(
          comm->allreduce(g, g, buckets[b].length, DataType::kFloat32, ReduceOp::kAvg,
                          CollectiveOptions{codec, useFeedback ? &feedback[b] : nullptr})
              .withContext("allreduce of bucket " + buckets[b].name));
    }
    float stats[2] = {static_cast<float>(loss),
                      static_cast<float>(correct) / static_cast<float>(rows.size())};
    TERSE_RETURN_IF_ERROR(comm->allreduce(stats, stats, 2, DataType::kFloat32, ReduceOp::kAvg));

    const double progress = static_cast<double>(step) / static_cast<double>(totalSteps);
    const float lr = static_cast<float>(o.lr * 0.5 * (1.0 + std::cos(M_PI * progress)));
    const float mu = static_cast<float>(o.momentum);
    float* p = model.params().data();
    if (adam) {
      TERSE_RETURN_IF_ERROR(adam->step(*comm, p, grad.data(), lr));
    } else {
      for (size_t i = 0; i < count; ++i) {
        momentum[i] = mu * momentum[i] + grad[i];
        p[i] -= lr * momentum[i];
      }
    }
    const uint64_t done = step + 1;
    steps.push_back(StepRecord{done, stats[0], stats[1]});

    if (done % perEpoch == 0) {
      EpochRecord e{done / perEpoch, done, 0, 0, 0, 0};
      TERSE_RETURN_IF_ERROR(evaluate(*comm, model, train, &e.trainLoss, &e.trainAcc));
      TERSE_RETURN_IF_ERROR(evaluate(*comm, model, test, &e.testLoss, &e.testAcc));
      epochs.push_back(e);
      if (rank == 0 && !o.quiet)
        std::printf(
            "epoch %llu/%zu step %llu train_loss %.5f train_acc %.4f test_loss %.5f "
            "test_acc %.4f\n",
            static_cast<unsigned long long>(e.epoch), o.epochs,
            static_cast<unsigned long long>(done), e.trainLoss, e.trainAcc, e.testLoss, e.testAcc);
      std::fflush(stdout);
    }
    if (!o.checkpointDir.empty() && done == checkpointAt) {
      ::mkdir(o.checkpointDir.c_str(), 0755);  // an existing directory is fine
      if (rank == 0)
        TERSE_RETURN_IF_ERROR(
            saveModel(o.checkpointDir, ModelState{done, world, useFeedback ? codec : std::string(),
                                                  model.params(), momentum}));
      if (useFeedback) TERSE_RETURN_IF_ERROR(saveFeedback(o.checkpointDir, rank, feedback));
      if (adam) TERSE_RETURN_IF_ERROR(saveAdam(o.checkpointDir, rank, *adam));
      // Nobody leaves (or overwrites) before every file is complete.
      TERSE_RETURN_IF_ERROR(comm->barrier());
      if (rank == 0 && !o.quiet)
        std::printf("checkpoint at step %llu in '%s'\n", static_cast<unsigned long long>(done),
                    o.checkpointDir.c_str());
    }
    step = done;
    return Status::ok();
  };

  // --shrink-on-failure: the state at the start of the step in progress (`current`) and of the
  // step before it (`previous`), for the rank that failed a step and the one that completed a
  // step the others failed.
  StepState previous, current;
  auto save = [&](StepState* s) {
    s->params = model.params();
    s->momentum = momentum;
    s->feedback = feedback;
    if (adam) s->adam = adam->serialize();
    s->stepRecords = steps.size();
    s->epochRecords = epochs.size();
  };
  auto restore = [&](const StepState& s) -> Status {
    model.params() = s.params;
    momentum = s.momentum;
    feedback = s.feedback;
    if (adam) {
      TERSE_ASSIGN_OR_RETURN(OneBitAdam back,
                             OneBitAdam::deserialize(s.adam.data(), s.adam.size()));
      adam = std::move(back);
    }
    steps.resize(s.stepRecords, StepRecord{});
    epochs.resize(s.epochRecords, EpochRecord{});
    return Status::ok();
  };
  double failedAt = 0, shrinkSeconds = 0;
  bool reportNextStep = false;

  // After a failed call: the survivors shrink, agree on the last step they all completed (a
  // rank dying inside a call may have let some survivors finish a step the others failed), and
  // those one step ahead go back one step. The new world takes the data as a run started at its
  // size would (batchRows with the new rank and world: the same global batch, cut into new
  // shares), so it must divide the global batch.
  auto shrinkAfter = [&](const Status& failure) -> Status {
    failedAt = monotonicSeconds();
    std::printf("rank %d of %d: step %llu failed (%s); shrinking\n", rank, world,
                static_cast<unsigned long long>(step + 1), failure.toString().c_str());
    std::fflush(stdout);
    TERSE_RETURN_IF_ERROR(restore(current));
    std::vector<int> gone;
    auto shrunk = comm->shrink({}, &gone);
    if (!shrunk.isOk())
      return shrunk.status().withContext("shrinking after the failure of step " +
                                         std::to_string(step + 1) + " (" + failure.toString() +
                                         ")");
    const int oldRank = rank, oldWorld = world;
    comm = std::move(shrunk).value();  // the old communicator is done with
    rank = comm->rank();
    world = comm->size();
    shrinkSeconds = monotonicSeconds() - failedAt;
    if (o.batch % static_cast<size_t>(world) != 0)
      return errorInvalidArgument(
          "after a shrink to %d ranks the global batch %zu is not a multiple of the world size: "
          "with --shrink-on-failure pick a --batch that every world size it may shrink to "
          "divides (e.g. 120 for 5, 4, 3 and 2 ranks)",
          world, o.batch);
    // Step counts are exact in floats up to 2^24, far beyond any run of this example.
    std::vector<float> mine(1, static_cast<float>(step)), all(static_cast<size_t>(world));
    TERSE_RETURN_IF_ERROR(
        comm->allgather(mine.data(), all.data(), all.size(), DataType::kFloat32, {"none"})
            .withContext("agreeing on the last completed step after the shrink"));
    const auto lowest = static_cast<uint64_t>(*std::min_element(all.begin(), all.end()));
    const auto highest = static_cast<uint64_t>(*std::max_element(all.begin(), all.end()));
    if (highest - lowest > 1)
      return errorInternal(
          "after the shrink the survivors are at steps %llu..%llu, more than "
          "one step apart",
          static_cast<unsigned long long>(lowest), static_cast<unsigned long long>(highest));
    const bool back = step > lowest;
    if (back) TERSE_RETURN_IF_ERROR(restore(previous));
    step = lowest;
    if (useFeedback) {
      // Each survivor keeps its own worker residual; the server residuals move to the chunks
      // the new world gives each rank, the dead ranks' chunks lost (relayoutFeedback).
      std::vector<ErrorFeedback*> states;
      for (ErrorFeedback& ef : feedback) states.push_back(&ef);
      TERSE_RETURN_IF_ERROR(relayoutFeedback(*comm, oldRank, oldWorld, states)
                                .withContext("re-laying out the residuals after the shrink"));
    }
    if (adam && momentumPath) {
      // OneBitAdam's moments, step and phase are replicated and stay; its compressed momentum's
      // residuals are re-laid out like the gradients', by the old rank and world known here:
      // the rollback restored the optimizer from its serialized form, which does not record the
      // world its residuals were laid out for.
      ErrorFeedback residuals = adam->feedback();
      TERSE_RETURN_IF_ERROR(
          relayoutFeedback(*comm, oldRank, oldWorld, {&residuals})
              .withContext("re-laying out OneBitAdam's residuals after the shrink"));
      TERSE_RETURN_IF_ERROR(adam->replaceFeedback(std::move(residuals)));
    }
    shrinks.push_back(ShrinkRecord{step, world, gone});
    std::string names;
    for (int r : gone) names += (names.empty() ? "" : ",") + std::to_string(r);
    std::printf(
        "rank %d of %d (was %d of %d): rank(s) %s gone; going on from step %llu%s; "
        "shrink %.3f s\n",
        rank, world, oldRank, oldWorld, names.c_str(), static_cast<unsigned long long>(step),
        back ? " (back one step)" : "", shrinkSeconds);
    std::fflush(stdout);
    reportNextStep = true;
    return Status::ok();
  };

  while (step < endStep) {
    if (haltAt == step) {
      std::printf("halting before step %llu (pid %d)\n", static_cast<unsigned long long>(step),
                  static_cast<int>(::getpid()));
      std::fflush(stdout);
      std::raise(SIGSTOP);
    }
    if (o.shrinkOnFailure) save(&current);
    Status done = oneStep();
    if (done.isOk()) {
      if (reportNextStep) {
        const double now = monotonicSeconds();
        std::printf(
            "rank %d of %d: step %llu after the shrink done at monotonic %.6f (%.3f s "
            "after the failure)\n",
            rank, world, static_cast<unsigned long long>(step), now, now - failedAt);
        std::fflush(stdout);
        reportNextStep = false;
      }
      if (o.shrinkOnFailure) std::swap(previous, current);
      continue;
    }
    if (!o.shrinkOnFailure) return done;
    TERSE_RETURN_IF_ERROR(shrinkAfter(done));
  }
  if (rank == 0 && !o.log.empty())
    TERSE_RETURN_IF_ERROR(writeLog(o, codec, useFeedback, world, count, startStep, totalSteps,
                                   steps, epochs, comm->bytesSent(), shrinks));
  if (o.shrinkOnFailure)
    std::printf("rank %d of %d: final weights %016llx after step %llu\n", rank, world,
                static_cast<unsigned long long>(weightsHash(model.params())),
                static_cast<unsigned long long>(step));
  return comm->barrier();
}

}  // namespace
}  // namespace terse::train

int main(int argc, char** argv) {
  terse::train::Options options;
  if (!terse::train::parseOptions(argc, argv, &options)) return 2;
  terse::Status status = terse::train::run(options);
  if (!status.isOk()) {
    std::fprintf(stderr, "terse-train: %s\n", status.toString().c_str());
    return 1;
  }
  return 0;
}
