//===- pipeforge-adamw-replay.cpp - The optimizer on given gradients ------===//
//
// Test utility: runs the runtime's AdamW (rt/Optimizer.h) with its
// learning-rate schedule, weight-decay rule and clipping over parameters and
// per-step gradients read from JSON, and writes the final parameters and the
// learning rate of each step. test/Runtime/adamw-vs-torch.test feeds the
// same numbers to PyTorch's AdamW + LambdaLR + clip_grad_norm_.
//
//   pipeforge-adamw-replay IN.json -o OUT.json
//
// IN:  {"lr", "beta1", "beta2", "eps", "weight_decay", "max_grad_norm",
//       "decay_all", "schedule": {"kind", "warmup", "decay_steps", "min_lr"},
//       "params": [{"name", "shape", "data"}], "grads": [[[...] per param]
//       per step]}
// OUT: {"params": [{"name", "data"}], "lrs": [...], "decay": [...]}
//
//===----------------------------------------------------------------------===//

#include "pipeforge/rt/Optimizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>

using namespace pipeforge::rt;
using nlohmann::json;

static int fail(const std::string &m) {
  std::fprintf(stderr, "pipeforge-adamw-replay: %s\n", m.c_str());
  return 1;
}

int main(int argc, char **argv) {
  if (argc != 4 || std::string(argv[2]) != "-o")
    return fail("usage: pipeforge-adamw-replay IN.json -o OUT.json");
  json in;
  try {
    std::ifstream f(argv[1]);
    in = json::parse(f);
  } catch (const std::exception &e) {
    return fail(std::string(argv[1]) + ": " + e.what());
  }
  try {
    AdamWConfig c;
    c.lr = in.at("lr");
    c.beta1 = in.at("beta1");
    c.beta2 = in.at("beta2");
    c.eps = in.at("eps");
    c.weightDecay = in.at("weight_decay");
    c.maxGradNorm = in.at("max_grad_norm");
    if (Status s = checkConfig(c); !s)
      return fail(s.message());
    const json &js = in.at("schedule");
    LrSchedule sched;
    auto kind = parseLrScheduleKind(js.at("kind"));
    if (!kind)
      return fail(kind.message());
    sched.kind = *kind;
    sched.warmupSteps = js.at("warmup");
    sched.decaySteps = js.at("decay_steps");
    sched.minLr = js.at("min_lr");
    if (Status s = checkLrSchedule(sched, c.lr); !s)
      return fail(s.message());
    const bool decayAll = in.at("decay_all");

    AdamW opt(c);
    const json &params = in.at("params");
    std::vector<std::vector<float>> data(params.size()), grad(params.size());
    json out = {{"params", json::array()},
                {"lrs", json::array()},
                {"decay", json::array()}};
    for (size_t i = 0; i < params.size(); ++i) {
      data[i] = params[i].at("data").get<std::vector<float>>();
      grad[i].assign(data[i].size(), 0.f);
      std::vector<int64_t> shape = params[i].at("shape");
      bool decay = decayAll || decaysByDefault(shape);
      out["decay"].push_back(decay);
      if (Status s = opt.addParam(params[i].at("name"), data[i].data(),
                                  grad[i].data(), data[i].size(), decay);
          !s)
        return fail(s.message());
    }
    int64_t k = 0;
    for (const json &step : in.at("grads")) {
      ++k;
      for (size_t i = 0; i < params.size(); ++i) {
        // Into the registered buffer: the optimizer holds its address.
        auto g = step.at(i).get<std::vector<float>>();
        if (g.size() != grad[i].size())
          return fail("step " + std::to_string(k) + ": gradient " +
                      std::to_string(i) + " has the wrong size");
        std::copy(g.begin(), g.end(), grad[i].begin());
      }
      double lr = sched.at(c.lr, k);
      opt.setLearningRate(lr);
      out["lrs"].push_back(lr);
      opt.step(opt.localGradInfo());
    }
    for (size_t i = 0; i < params.size(); ++i)
      out["params"].push_back(
          {{"name", params[i].at("name")}, {"data", data[i]}});
    std::ofstream o(argv[3]);
    o << out.dump() << "\n";
    o.close();
    if (!o)
      return fail(std::string("cannot write ") + argv[3]);
  } catch (const std::exception &e) {
    return fail(std::string(argv[1]) + ": " + e.what());
  }
  return 0;
}
