// `strata plot OUT`: a PNG of a training run (train/run_plot.h).
#include <cstdio>
#include <cxxopts.hpp>

#include "cli/commands.h"
#include "train/run_plot.h"

namespace strata::cli {

int plot_main(int argc, char** argv) {
  cxxopts::Options o("strata plot",
                     "Plot a training run from OUT/metrics.jsonl with gnuplot: train and validation loss, learning "
                     "rate, gradient norm, tokens/s, and bytes between tiers when offloading. Works while the run "
                     "is still going.");
  o.add_options()("run", "the run's --out directory", cxxopts::value<std::string>())(
      "output", "the PNG to write (default: OUT/plot.png)", cxxopts::value<std::string>()->default_value(""))(
      "gnuplot", "the gnuplot program", cxxopts::value<std::string>()->default_value("gnuplot"))("h,help",
                                                                                                 "show this help");
  o.parse_positional({"run"});
  o.positional_help("OUT");
  cxxopts::ParseResult r;
  if (auto done = parse_options(o, argc, argv, "plot", r)) return *done;
  if (!r.count("run")) return usage_error("plot", "give the run's --out directory");
  const std::string png =
      plot_run({r["run"].as<std::string>(), r["output"].as<std::string>(), r["gnuplot"].as<std::string>()});
  std::printf("%s\n", png.c_str());
  return 0;
}

}  // namespace strata::cli
