//===- RankGrid.h - World ranks as tensor x pipeline x expert x data ------===//
//
// One definition of how a job's processes are arranged, used by every
// transport (MPI, threads, NCCL through MPI) and by the driver's messages:
//
//   world rank = ((replica * E + expert) * P + pipeline) * T + tensor
//
// so the T ranks of a tensor-parallel group are consecutive (with the
// usual fill of a host's slots they share a node: their collectives run
// in every layer), then the P pipeline ranks of one (replica, expert)
// slot, then the E expert-parallel slots of a replica, then the D
// data-parallel replicas. That is the default layout, `pp-fastest`; the
// `dp-fastest` layout (pipeforge-run --rank-layout dp-fastest) swaps the
// outer two:
//
//   world rank = ((pipeline * E + expert) * D + replica) * T + tensor
//
// so that, after the tensor group, the replicas of a pipeline rank are
// consecutive (a node holds one pipeline rank of several replicas: the
// planner's dp-in-node). Each communication group is the set of ranks that
// differ in one coordinate; `group` names it by an instance id (the same for
// every member, distinct between groups of one kind), its size and the member's
// index.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_RT_RANKGRID_H
#define PIPEFORGE_RT_RANKGRID_H

#include <string>

namespace pipeforge::rt {

struct RankCoord {
  int pipeline = 0; ///< stage-owning rank within the pipeline, 0..P-1
  int expert = 0;   ///< index in the expert-parallel group, 0..E-1
  int replica = 0;  ///< data-parallel replica, 0..D-1
  int tensor = 0;   ///< index in the tensor-parallel group, 0..T-1
};

/// One communication group as seen by one member.
struct GroupPosition {
  int instance = 0; ///< the same for all members of the group
  int size = 1;
  int index = 0; ///< this member's position in the group
};

struct RankGrid {
  int P = 1; ///< pipeline ranks
  int E = 1; ///< expert-parallel group size
  int D = 1; ///< data-parallel replicas
  int T = 1; ///< tensor-parallel group size
  /// The layout: false `pp-fastest` (the default), true `dp-fastest`.
  bool dataFastest = false;

  int size() const { return P * E * D * T; }
  bool valid() const { return P >= 1 && E >= 1 && D >= 1 && T >= 1; }

  RankCoord coordOf(int worldRank) const {
    int slot = worldRank / T;
    if (dataFastest)
      return {slot / (D * E), (slot / D) % E, slot % D, worldRank % T};
    return {slot % P, (slot / P) % E, slot / (P * E), worldRank % T};
  }
  int worldRank(const RankCoord &c) const {
    if (dataFastest)
      return ((c.pipeline * E + c.expert) * D + c.replica) * T + c.tensor;
    return ((c.replica * E + c.expert) * P + c.pipeline) * T + c.tensor;
  }

  /// The pipeline of (replica, expert, tensor): ranks that differ in
  /// `pipeline`.
  GroupPosition pipelineGroup(const RankCoord &c) const {
    return {(c.replica * E + c.expert) * T + c.tensor, P, c.pipeline};
  }
  /// The data-parallel group of (expert, pipeline, tensor).
  GroupPosition dataParallelGroup(const RankCoord &c) const {
    return {(c.expert * P + c.pipeline) * T + c.tensor, D, c.replica};
  }
  /// The expert-parallel group of (replica, pipeline, tensor).
  GroupPosition expertGroup(const RankCoord &c) const {
    return {(c.replica * P + c.pipeline) * T + c.tensor, E, c.expert};
  }
  /// The tensor-parallel group of (replica, expert, pipeline): consecutive
  /// world ranks.
  GroupPosition tensorGroup(const RankCoord &c) const {
    return {(c.replica * E + c.expert) * P + c.pipeline, T, c.tensor};
  }

  /// "2 tensor-parallel ranks x 2 pipeline ranks x 2 expert-parallel ranks
  /// x 2 data-parallel replicas = 16 processes" (the tensor and expert
  /// factors only when above 1).
  std::string describe() const {
    return (T > 1 ? std::to_string(T) + " tensor-parallel ranks x " : "") +
           std::to_string(P) + " pipeline ranks x " +
           (E > 1 ? std::to_string(E) + " expert-parallel ranks x " : "") +
           std::to_string(D) +
           " data-parallel replicas = " + std::to_string(size()) + " processes";
  }
};

} // namespace pipeforge::rt

#endif // PIPEFORGE_RT_RANKGRID_H
