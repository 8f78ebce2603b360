// The suite's reports: results.md (tables) and the gnuplot PNGs, from results.json's data.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace strata::bench {

// Writes dir/results.md.
void write_markdown(const std::string& dir, const nlohmann::ordered_json& results);
// Writes dir/suite.png (throughput and peak device memory against model size and rank
// count) and, with scaling results, dir/scaling.png, through gnuplot (its data files and
// script stay beside them). Returns the PNGs written.
std::vector<std::string> write_plots(const std::string& dir, const nlohmann::ordered_json& results,
                                     const std::string& gnuplot = "gnuplot");

}  // namespace strata::bench
