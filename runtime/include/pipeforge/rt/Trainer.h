//===- Trainer.h - One rank's training run ----------------------*- C++ -*-===//
//
// The training loop around the executor (docs/runtime.md): the data source,
// the optimizer (AdamW or SGD), the step loop, checkpoint timing and the
// checkpoint folder scheme, traces and the final weights. The executor only
// interprets a rank's actions; pipeforge-run only parses options and picks a
// transport and a backend.
//
//   auto t = Trainer::create(program, backend, transport, options);
//   if (options.resume) t->resume();
//   t->run(onStep);      // steps, checkpoints every saveEvery steps
//   t->finish();         // --trace, --dump-weights
//
// Checkpoints: <checkpointDir>/step-NNNNNNNN/ (Checkpoint.h) after every
// saveEvery-th step; resume() continues from the latest complete one
// (the one with a manifest), bitwise. Every call is collective over the
// transport's world.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_RT_TRAINER_H
#define PIPEFORGE_RT_TRAINER_H

#include "pipeforge/rt/Executor.h"

#include <functional>
#include <memory>
#include <string>

namespace pipeforge::rt {

struct TrainerOptions {
  int64_t steps = 10; ///< the total: a resumed run continues up to it
  /// "adamw" (with maxGradNorm clipping, post-validation) or "sgd".
  std::string optimizer = "adamw";
  double lr = 1e-3;
  double maxGradNorm = 0; ///< <= 0: no clipping
  /// AdamW's decoupled weight decay, on the tensors decaysByDefault picks
  /// (matrices, embeddings), or on every tensor with decayAll.
  double weightDecay = 0;
  bool decayAll = false;
  /// The learning rate of each step (AdamW; SGD takes only a constant).
  LrSchedule lrSchedule;
  /// "auto" (synthetic for vocab >= 256, else pattern), "synthetic",
  /// "pattern", or a token file (Data.h).
  std::string data = "auto";
  /// An end-of-document token id (pipeforge-run --eos): with
  /// executor.docMask the documents end after it, in any data; -1: the
  /// data's own documents (a Megatron-LM dataset's index).
  int64_t eos = -1;
  /// Empty: no checkpoints. "{rank}" stands for the world rank (a folder
  /// per rank); a folder may be shared by all ranks or hold only the files
  /// of the ranks that see it (node-local disks): no rank reads another's.
  std::string checkpointDir;
  int64_t saveEvery = 0;       ///< 0: never
  std::string tracePath;       ///< finish(): the merged Chrome trace
  std::string dumpWeightsPath; ///< finish(): the gathered weights
  /// A Hugging Face model directory the parameters (and load-balancing
  /// biases) start from instead of their initialisers (docs/huggingface.md);
  /// each rank reads only its rows. Empty: the program's initialisers.
  std::string initFrom;
  /// finish(): the trained model as a Hugging Face model directory
  /// (config.json, safetensors) that transformers loads. Empty: none.
  std::string saveHfDir;
  ExecutorOptions executor;
};

/// `dir` with every "{rank}" replaced by `worldRank` (TrainerOptions::
/// checkpointDir).
std::string checkpointDirOf(const std::string &dir, int worldRank);
/// <dir>/step-00000012: the checkpoint taken after step 12.
std::string checkpointSubdir(const std::string &dir, int64_t step);
/// The latest complete checkpoint (one with a manifest) under `dir`, or -1.
int64_t latestCheckpoint(const std::string &dir);

class Trainer {
public:
  /// Errors: bad options (lr, optimizer, data), a token file that does not
  /// fit the model, the executor's errors.
  static Expected<std::unique_ptr<Trainer>> create(const Program &prog,
                                                   Backend &be, Transport &tr,
                                                   const TrainerOptions &o);
  ~Trainer();

  /// Loads the latest complete checkpoint under checkpointDir; returns the
  /// step it continues after. Errors name the checkpoint and what differs
  /// (world size, program, data, optimizer, parameter names and shapes).
  Expected<int64_t> resume();
  /// Runs steps stepsDone()+1 .. steps. `before(k)` runs before step k,
  /// `after(stats)` after it (rank 0 prints there); a checkpoint is saved
  /// after every saveEvery-th step.
  Status run(const std::function<void(int64_t)> &before,
             const std::function<void(const StepStats &)> &after);
  /// Writes the trace and the weights (when asked for).
  Status finish();

  Status saveCheckpoint(int64_t step);
  int64_t stepsDone() const;
  Executor &executor();

  struct Impl;

private:
  explicit Trainer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl;
};

} // namespace pipeforge::rt

#endif // PIPEFORGE_RT_TRAINER_H
