#include "train/run_plot.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/text_file.h"

namespace strata {

namespace {

struct Point {
  double loss = NAN, lr = NAN, norm = NAN, tps = NAN, useful = NAN, eval = NAN;
  double bytes[4] = {0, 0, 0, 0};  // d2h, h2d, h2n, n2h per step
};
constexpr const char* kEdges[4] = {"d2h", "h2d", "h2n", "n2h"};

double number(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : NAN;
}

// metrics.jsonl by step: the last line of each step wins (a resumed run rewrites its tail);
// a line that does not parse is a write in progress (the run is still going) and is left out.
std::map<int64_t, Point> read_metrics(const std::string& path) {
  std::ifstream f(path);
  STRATA_CHECK(f.good(), "'" + path + "' cannot be read",
               "give the --out directory of a training run (it holds metrics.jsonl)");
  std::map<int64_t, Point> points;
  std::string line;
  while (std::getline(f, line)) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      continue;
    }
    if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) continue;
    Point p;
    p.loss = number(j, "loss"), p.lr = number(j, "lr"), p.norm = number(j, "grad_norm");
    p.tps = number(j, "tokens_per_s"), p.useful = number(j, "useful_tokens_per_s"), p.eval = number(j, "eval_loss");
    if (j.contains("timeline") && j["timeline"].contains("bytes"))
      for (int e = 0; e < 4; ++e) p.bytes[e] = number(j["timeline"]["bytes"], kEdges[e]);
    points[j["step"].get<int64_t>()] = p;
  }
  STRATA_CHECK(!points.empty(), "'" + path + "' holds no logged step yet",
               "plot once the run has logged its first step (--log-every sets how often)");
  return points;
}

// A string in gnuplot's single quotes, and a word in the shell's.
std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("''") : std::string(1, c);
  return q + "'";
}
std::string sh_quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}
std::string text(double v) {
  if (std::isnan(v)) return "NaN";
  char b[32];
  std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}

}  // namespace

std::string plot_run(const PlotOptions& opts) {
  namespace fs = std::filesystem;
  const std::string metrics = (fs::path(opts.run_dir) / "metrics.jsonl").string();
  const std::map<int64_t, Point> points = read_metrics(metrics);
  const std::string png = opts.output.empty() ? (fs::path(opts.run_dir) / "plot.png").string() : opts.output;
  const fs::path base = fs::path(png).replace_extension();
  const std::string dat = base.string() + ".dat", gp = base.string() + ".gp";

  bool evals = false, useful = false, offload = false;
  std::ostringstream d;  // step loss lr norm tps useful eval d2h h2d h2n n2h (bytes in MiB)
  d << "# step loss lr grad_norm tokens_per_s useful_tokens_per_s eval_loss d2h_MiB h2d_MiB h2n_MiB n2h_MiB\n";
  for (const auto& [step, p] : points) {
    evals |= !std::isnan(p.eval);
    useful |= !std::isnan(p.useful) && std::fabs(p.useful - p.tps) > 1e-9 * p.tps;
    for (double b : p.bytes) offload |= b > 0;
    d << step;
    for (double v : {p.loss, p.lr, p.norm, p.tps, p.useful, p.eval}) d << ' ' << text(v);
    for (double b : p.bytes) d << ' ' << text(b / double(1 << 20));
    d << '\n';
  }
  write_text_file(dat, d.str());

  const int panels = offload ? 5 : 4, rows = (panels + 1) / 2;
  std::ostringstream g;
  g << "set terminal pngcairo size 1200," << 380 * rows << " font ',10'\n"
    << "set output " << quoted(png) << "\n"
    << "set datafile missing 'NaN'\nset grid\nset key top right\nset xlabel 'step'\n"
    << "set multiplot layout " << rows << ",2 title "
    << quoted(fs::path(opts.run_dir).filename().string() + ": " + std::to_string(points.rbegin()->first) + " steps")
    << "\n";
  const std::string f = quoted(dat);
  g << "set title 'loss'\nplot " << f << " using 1:2 with lines lw 2 title 'train'";
  if (evals) g << ", " << f << " using 1:7 with linespoints pt 7 lw 2 title 'validation'";
  g << "\nset title 'learning rate'\nplot " << f << " using 1:3 with lines lw 2 notitle\n"
    << "set title 'gradient norm'\nplot " << f << " using 1:4 with lines lw 2 notitle\n"
    << "set title 'tokens/s'\nplot " << f << " using 1:5 with lines lw 2 title 'all'";
  if (useful) g << ", " << f << " using 1:6 with lines lw 2 title 'counted by the loss'";
  g << "\n";
  if (offload) {
    g << "set title 'bytes per step between tiers (MiB)'\nplot ";
    for (int e = 0; e < 4; ++e)
      g << (e ? ", " : "") << f << " using 1:" << 8 + e << " with lines lw 2 title '" << kEdges[e] << "'";
    g << "\n";
  }
  g << "unset multiplot\n";
  write_text_file(gp, g.str());

  const std::string log = base.string() + ".log";
  const std::string check = opts.gnuplot + " -e 'set terminal pngcairo' >/dev/null 2>&1";
  STRATA_CHECK(std::system(check.c_str()) == 0, "'" + opts.gnuplot + "' with the pngcairo terminal is not available",
               "apt-get install gnuplot-nox (tools/setup.sh installs it), or give --gnuplot PATH");
  const std::string cmd = opts.gnuplot + " " + sh_quoted(gp) + " >" + sh_quoted(log) + " 2>&1";
  STRATA_CHECK(std::system(cmd.c_str()) == 0, "gnuplot failed on '" + gp + "'", "see '" + log + "'");
  std::error_code ec;
  fs::remove(log, ec);
  return png;
}

}  // namespace strata
