// `strata plot OUT`: a PNG of a run from OUT/metrics.jsonl, drawn by gnuplot: train and
// validation loss, learning rate, gradient norm, tokens/s, and the bytes each step moved
// between tiers when the run offloads. It reads a finished run or one still writing (a last
// line cut short is left out), and a resumed run's log (the latest line of each step).
#pragma once
#include <string>

namespace strata {

struct PlotOptions {
  std::string run_dir;              // a training --out directory
  std::string output;               // the PNG ("": RUN_DIR/plot.png)
  std::string gnuplot = "gnuplot";  // the program
};

// Writes the PNG, and beside it the data and the gnuplot script that drew it (.dat, .gp).
// Returns the PNG's path. Throws naming what is missing (the log, gnuplot) or what failed.
std::string plot_run(const PlotOptions& opts);

}  // namespace strata
