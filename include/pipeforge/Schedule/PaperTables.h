//===- PaperTables.h - Reference numbers from the Zero Bubble paper -*- C++ -*-===//
//
// Table 9 of Qi et al., "Zero Bubble Pipeline Parallelism" (ICLR 2024):
// profiled T_F, T_B, T_W, T_comm in ms per setting, and Table 5: the bubble
// rates the paper computes from them for 1F1B, ZB-H1, ZB-H2 and ZB-2p.
// Used by benchmarks/table5.cpp and the tests that check the simulator's
// bubble definition against the paper.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_SCHEDULE_PAPERTABLES_H
#define PIPEFORGE_SCHEDULE_PAPERTABLES_H

namespace pipeforge::sched::paper {

struct ZeroBubbleSetting {
  const char *model; ///< "1.5B" ...
  int p, m;
  double tf, tb, tw, tcomm;           ///< Table 9, ms
  double r1f1b, rzbh1, rzbh2, rzb2p;  ///< Table 5 bubble rates
};

inline constexpr ZeroBubbleSetting kZeroBubbleSettings[] = {
    {"1.5B", 8, 24, 18.522, 18.086, 9.337, 0.601, .2431, .1585, .1083, .0433},
    {"1.5B", 8, 32, 18.513, 18.086, 9.331, 0.626, .1985, .1242, .0837, .0039},
    {"1.5B", 8, 64, 18.546, 18.097, 9.321, 0.762, .1240, .0674, .0444, .0026},
    {"6.2B", 8, 24, 29.718, 29.444, 19.927, 0.527, .2347, .1323, .0698, .0029},
    {"6.2B", 8, 32, 29.802, 29.428, 19.530, 0.577, .1898, .1045, .0559, .0022},
    {"6.2B", 8, 64, 29.935, 29.621, 19.388, 0.535, .1091, .0554, .0294, .0010},
    {"14.6B", 16, 48, 11.347, 11.248, 8.132, 0.377, .2552, .1397, .0672, .0066},
    {"14.6B", 16, 64, 11.307, 11.254, 8.101, 0.379, .2082, .1088, .0516, .0054},
    {"14.6B", 16, 128, 11.325, 11.308, 8.109, 0.378, .1251, .0576, .0266, .0028},
    {"28.3B", 32, 96, 10.419, 10.207, 7.715, 0.408, .2646, .1421, .0641, .0038},
    {"28.3B", 32, 128, 10.408, 10.204, 7.703, 0.408, .2168, .1106, .0490, .0029},
    {"28.3B", 32, 256, 10.402, 10.248, 7.698, 0.460, .1352, .0594, .0257, .0018},
};

} // namespace pipeforge::sched::paper

#endif
