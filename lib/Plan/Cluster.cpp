//===- Cluster.cpp - The cluster description JSON -------------------------===//
//
// Schema (docs/planner.md): gpus, gpus_per_node, memory_gb, peak_tflops,
// intra_node_gb_per_s, inter_node_gb_per_s (needed with more than one node),
// and the optional name, reserved_memory_gb, efficiency,
// memory_bandwidth_gb_per_s (default by the GPU class),
// all_reduce_efficiency, all_to_all_efficiency, p2p_efficiency (default 1),
// description.
// Unknown keys are errors, so a misspelt key is not silently ignored.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Plan/Planner.h"
#include "pipeforge/Support/InputFile.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <set>

using namespace pipeforge;
using namespace pipeforge::plan;
using json = nlohmann::json;

namespace {
Status keyError(const std::string &key, const std::string &what) {
  return Status::error("cluster: key '" + key + "': " + what);
}

/// A required (or optional, when `def` is given) finite number.
Status getNumber(const json &j, const std::string &key, double &out,
                 bool required, bool positive) {
  auto it = j.find(key);
  if (it == j.end()) {
    if (required)
      return Status::error("cluster: missing key '" + key + "'");
    return Status::ok();
  }
  if (!it->is_number())
    return keyError(key, std::string("expected a number, got ") +
                             it->type_name());
  double v = it->get<double>();
  if (!std::isfinite(v) || (positive ? v <= 0 : v < 0))
    return keyError(key, positive ? "expected a positive number"
                                  : "expected a number >= 0");
  out = v;
  return Status::ok();
}

Status getInt(const json &j, const std::string &key, int &out) {
  auto it = j.find(key);
  if (it == j.end())
    return Status::error("cluster: missing key '" + key + "'");
  if (!it->is_number_integer() && !it->is_number_unsigned())
    return keyError(key, std::string("expected an integer, got ") +
                             (it->is_number() ? "a fraction" : it->type_name()));
  long long v = it->get<long long>();
  if (v <= 0 || v > (1 << 24))
    return keyError(key, "expected a positive integer");
  out = static_cast<int>(v);
  return Status::ok();
}
} // namespace

Expected<Cluster> plan::parseCluster(const std::string &text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false,
                       /*ignore_comments=*/true);
  if (j.is_discarded())
    return Status::error("cluster: invalid JSON");
  if (!j.is_object())
    return Status::error("cluster: expected a JSON object");

  static const std::set<std::string> known = {
      "name",        "description",         "gpus",
      "gpus_per_node", "memory_gb",         "reserved_memory_gb",
      "peak_tflops", "efficiency",          "intra_node_gb_per_s",
      "inter_node_gb_per_s", "memory_bandwidth_gb_per_s",
      "all_reduce_efficiency", "all_to_all_efficiency", "p2p_efficiency",
      "host_link_gb_per_s", "fp8_peak_tflops"};
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!known.count(it.key()))
      return Status::error("cluster: unknown key '" + it.key() +
                           "' (known: gpus gpus_per_node memory_gb "
                           "reserved_memory_gb peak_tflops efficiency "
                           "intra_node_gb_per_s inter_node_gb_per_s "
                           "memory_bandwidth_gb_per_s all_reduce_efficiency "
                           "all_to_all_efficiency p2p_efficiency "
                           "host_link_gb_per_s fp8_peak_tflops name description)");

  Cluster c;
  if (auto it = j.find("name"); it != j.end()) {
    if (!it->is_string())
      return keyError("name", "expected a string");
    c.name = it->get<std::string>();
  }
  if (Status s = getInt(j, "gpus", c.gpus); !s)
    return s;
  if (Status s = getInt(j, "gpus_per_node", c.gpusPerNode); !s)
    return s;
  if (c.gpus > c.gpusPerNode && c.gpus % c.gpusPerNode != 0)
    return keyError("gpus", std::to_string(c.gpus) +
                                " GPUs do not fill whole nodes of " +
                                std::to_string(c.gpusPerNode) +
                                " (gpus_per_node)");
  if (Status s = getNumber(j, "memory_gb", c.memoryGiB, true, true); !s)
    return s;
  if (Status s = getNumber(j, "reserved_memory_gb", c.reservedGiB, false,
                           false);
      !s)
    return s;
  if (c.reservedGiB >= c.memoryGiB)
    return keyError("reserved_memory_gb", "must be below memory_gb");
  if (Status s = getNumber(j, "peak_tflops", c.peakTflops, true, true); !s)
    return s;
  if (Status s = getNumber(j, "efficiency", c.efficiency, false, true); !s)
    return s;
  if (c.efficiency > 1)
    return keyError("efficiency", "expected a fraction of peak in (0, 1]");
  if (Status s = getNumber(j, "intra_node_gb_per_s", c.intraNodeGBps, true,
                           true);
      !s)
    return s;
  bool multiNode = c.gpus > c.gpusPerNode;
  if (Status s = getNumber(j, "inter_node_gb_per_s", c.interNodeGBps,
                           multiNode, true);
      !s)
    return s;
  // HBM bandwidth for the roofline: when absent, the GPU class's (resolved
  // here so that reports show the value used).
  if (Status s = getNumber(j, "memory_bandwidth_gb_per_s",
                           c.memoryBandwidthGBps, false, true);
      !s)
    return s;
  if (c.memoryBandwidthGBps <= 0)
    c.memoryBandwidthGBps = c.defaultMemoryBandwidthGBps();
  for (auto [key, field] :
       {std::pair<const char *, double *>{"all_reduce_efficiency",
                                          &c.allReduceEfficiency},
        {"all_to_all_efficiency", &c.allToAllEfficiency},
        {"p2p_efficiency", &c.p2pEfficiency}}) {
    if (Status s = getNumber(j, key, *field, false, true); !s)
      return s;
    if (*field > 1)
      return keyError(key, "expected a fraction of the link bandwidth in "
                           "(0, 1]");
  }
  // The host link of activation offload's copies: when absent, PCIe 4.0
  // x16's (kDefaultHostLinkGBps).
  if (Status s =
          getNumber(j, "host_link_gb_per_s", c.hostLinkGBps, false, true);
      !s)
    return s;
  // The FP8 tensor-core peak of --float8's linear layers: when absent,
  // twice the bf16 peak on an H100-class GPU, none (the bf16 rate) below.
  if (Status s = getNumber(j, "fp8_peak_tflops", c.fp8PeakTflops, false, true);
      !s)
    return s;
  if (c.name.empty())
    c.name = "unnamed";
  return c;
}

double Cluster::hostLinkBytesPerSecond() const {
  return (hostLinkGBps > 0 ? hostLinkGBps : kDefaultHostLinkGBps) * 1e9;
}

Expected<Cluster> plan::readClusterFile(const std::string &path) {
  // A regular file or standard input (Support/InputFile.h).
  std::string text, error;
  if (!readInputFile(path, text, error))
    return Status::error("--cluster: " + error);
  auto cluster = parseCluster(text);
  if (!cluster)
    return Status::error(path + ": " + cluster.message());
  return cluster;
}
