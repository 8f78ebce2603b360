#include "bench/suite_report.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/text_file.h"

namespace strata::bench {

namespace {

using ojson = nlohmann::ordered_json;

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::string label(const ojson& r) {
  return "stage " + std::to_string(r["stage"].get<int>()) +
         (r["offload"] == "none" ? "" : " offload " + r["offload"].get<std::string>()) +
         (r["checkpointing"].get<bool>() ? " ckpt" : "");
}

// Series of ok runs: key -> points (x, row). by_size: one line per stage/offload/ckpt and
// rank count, over model sizes; otherwise one per model and stage/offload/ckpt, over ranks.
std::map<std::string, std::vector<std::pair<double, const ojson*>>> series(const ojson& runs, bool by_size) {
  std::map<std::string, std::vector<std::pair<double, const ojson*>>> s;
  for (const ojson& r : runs) {
    if (r["status"] != "ok") continue;
    // Within one sweep only: sweeps differ in batch shape, so their points do not join up.
    const std::string key = r["sweep"].get<std::string>() + ": " +
                            (by_size ? label(r) + ", " + std::to_string(r["ranks"].get<int>()) + " rank(s)"
                                     : r["model"].get<std::string>() + " " + label(r));
    s[key].push_back({by_size ? r["params"].get<double>() : r["ranks"].get<double>(), &r});
  }
  // A line needs two distinct points.
  for (auto it = s.begin(); it != s.end();) {
    std::set<double> xs;
    for (auto& p : it->second) xs.insert(p.first);
    it = xs.size() < 2 ? s.erase(it) : std::next(it);
  }
  for (auto& [k, v] : s) std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.first < b.first; });
  return s;
}

std::string quote(std::string s) {
  for (char& c : s)
    if (c == '"') c = '\'';
  return "\"" + s + "\"";
}

}  // namespace

void write_markdown(const std::string& dir, const ojson& results) {
  std::ostringstream md;
  const ojson& m = results["machine"];
  md << "# strata bench suite (" << results["mode"].get<std::string>() << "), "
     << results["started_utc"].get<std::string>() << "\n\n"
     << "Machine: " << m["cpu"].get<std::string>() << ", " << m["cpus"].get<int>() << " CPUs, "
     << m["mem_total"].get<std::string>() << "; " << m["device"].get<std::string>()
     << (m["peak_tflops"].is_null() ? " (peak unknown: no MFU)" : "") << ".\n\n"
     << "FLOPs per token: " << results["flops_per_token"].get<std::string>() << ".\n"
     << "Peaks are per rank (the largest over ranks); *plan* is `strata plan`'s prediction for the same row. "
        "Communication is the bytes one rank sends per step (ring volumes).\n\n";
  md << "| sweep | model | params | stage | offload | ckpt | ranks | tokens/s | TFLOP/s/device | MFU | device GB "
        "(plan) | host GB (plan) | NVMe GB (plan) | comm MB/step | overlap | status |\n"
     << "|---|---|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n";
  for (const ojson& r : results["runs"]) {
    const ojson& p = r["plan"];
    md << "| " << r["sweep"].get<std::string>() << " | " << r["model"].get<std::string>() << " | "
       << fmt("%.3gM", r["params"].get<double>() / 1e6) << " | " << r["stage"].get<int>() << " | "
       << r["offload"].get<std::string>() << " | " << (r["checkpointing"].get<bool>() ? "yes" : "no") << " | "
       << r["ranks"].get<int>() << " | ";
    if (r["status"] == "ok") {
      const ojson& s = r["result"];
      const ojson& pk = s["peak_bytes"];
      md << fmt("%.0f", s["tokens_per_s"].get<double>()) << " | " << fmt("%.4f", s["tflops_per_device"].get<double>())
         << " | " << (s["mfu"].is_null() ? "-" : fmt("%.1f%%", 100 * s["mfu"].get<double>())) << " | "
         << fmt("%.3f", pk["device"].get<double>() / 1e9) << " (" << fmt("%.3f", p["device"].get<double>() / 1e9)
         << ") | " << fmt("%.3f", pk["host"].get<double>() / 1e9) << " (" << fmt("%.3f", p["host"].get<double>() / 1e9)
         << ") | " << fmt("%.3f", pk["nvme"].get<double>() / 1e9) << " (" << fmt("%.3f", p["nvme"].get<double>() / 1e9)
         << ") | " << fmt("%.2f", s["comm_bytes_per_step"].get<double>() / 1e6) << " | "
         << fmt("%.2f", s["overlap"].get<double>()) << " | ok |\n";
    } else {
      const std::string why = r.contains("reason") ? r["reason"].get<std::string>() : r["error"].get<std::string>();
      md << "- | - | - | - (" << fmt("%.3g", p["device"].get<double>() / 1e9) << ") | - ("
         << fmt("%.3g", p["host"].get<double>() / 1e9) << ") | - (" << fmt("%.3g", p["nvme"].get<double>() / 1e9)
         << ") | - | - | " << r["status"].get<std::string>() << ": " << why << " |\n";
    }
  }
  if (results.contains("scaling")) {
    const ojson& s = results["scaling"];
    const ojson& f = s["family"];
    md << "\n## Largest trainable model within " << s["device_mem_per_rank"].get<std::string>()
       << " of device memory per rank\n\n"
       << "Family: GPT-2, n_embd " << f["n_embd"].get<int>() << ", " << f["n_head"].get<int>() << " heads, vocab "
       << f["vocab_size"].get<int>() << "; only the layer count varies. " << s["precision"].get<std::string>()
       << ", micro-batch " << s["micro_batch"].get<int>() << " × " << s["seq_len"].get<int>()
       << " tokens. *Measured*: the largest that trained (every probe is a real run); *plan*: the largest `strata "
          "plan` says fits.\n\n"
       << "| stage | ranks | measured layers | measured params | plan layers | plan params | runs |\n"
       << "|---:|---:|---:|---:|---:|---:|---:|\n";
    for (const ojson& c : s["cells"]) {
      const bool bad = c.contains("error");
      md << "| " << c["stage"].get<int>() << " | " << c["ranks"].get<int>() << " | "
         << (bad ? "failed: " + c["error"].get<std::string>()
                 : std::to_string(c["measured_layers"].get<int>()) + (c["capped"].get<bool>() ? " (cap)" : ""))
         << " | " << (bad ? "-" : fmt("%.3gM", c["measured_params"].get<double>() / 1e6)) << " | "
         << c["planned_layers"].get<int>() << " | " << fmt("%.3gM", c["planned_params"].get<double>() / 1e6) << " | "
         << c["probes"].size() << " |\n";
    }
  }
  write_text_file(dir + "/results.md", md.str());
}

std::vector<std::string> write_plots(const std::string& dir, const ojson& results, const std::string& gnuplot) {
  std::vector<std::string> written;
  std::ostringstream gp, dat;
  int block = 0;
  // One data block per series; the script plots each by its index.
  // Against model size both axes are logarithmic (sizes and throughputs span decades).
  auto add_panel = [&](const std::string& title, const std::string& xlabel, const std::string& ylabel, bool logx,
                       const std::map<std::string, std::vector<std::pair<double, const ojson*>>>& s, auto y) {
    gp << "set title " << quote(title) << "\nset xlabel " << quote(xlabel) << "\nset ylabel " << quote(ylabel) << "\n"
       << (logx ? "set logscale xy\n" : "unset logscale xy\n");
    if (s.empty()) {
      gp << "set label 1 'no series with two or more points' at graph 0.5, 0.5 center\nplot [0:1] [0:1] NaN notitle\n"
            "unset label 1\n";
      return;
    }
    gp << "plot ";
    bool first = true;
    for (const auto& [key, pts] : s) {
      for (const auto& [x, r] : pts) dat << x << " " << y(*r) << "\n";
      dat << "\n\n";
      gp << (first ? "" : ", ") << "'suite.dat' index " << block++ << " using 1:2 with linespoints title "
         << quote(key);
      first = false;
    }
    gp << "\n";
  };
  const ojson& runs = results["runs"];
  auto tps = [](const ojson& r) { return r["result"]["tokens_per_s"].get<double>(); };
  auto dev = [](const ojson& r) { return r["result"]["peak_bytes"]["device"].get<double>() / 1e9; };
  gp << "set terminal pngcairo size 1600,1200 font ',10'\nset output 'suite.png'\nset key top right font ',8'\n"
     << "set grid\nset multiplot layout 2,2 title "
     << quote("strata bench suite (" + results["mode"].get<std::string>() + "), " +
              results["started_utc"].get<std::string>())
     << "\n";
  const auto by_size = series(runs, true), by_ranks = series(runs, false);
  add_panel("throughput against model size", "parameters", "tokens/s", true, by_size, tps);
  add_panel("peak device memory per rank against model size", "parameters", "GB", true, by_size, dev);
  add_panel("throughput against rank count", "ranks", "tokens/s", false, by_ranks, tps);
  add_panel("peak device memory per rank against rank count", "ranks", "GB", false, by_ranks, dev);
  gp << "unset multiplot\n";
  write_text_file(dir + "/suite.dat", dat.str());
  write_text_file(dir + "/suite.gp", gp.str());
  auto run_gnuplot = [&](const std::string& script, const std::string& png) {
    const std::string cmd = "cd '" + dir + "' && " + gnuplot + " " + script + " > " + script + ".log 2>&1";
    STRATA_CHECK(std::system(cmd.c_str()) == 0, "gnuplot failed on " + dir + "/" + script,
                 "see " + dir + "/" + script + ".log");
    written.push_back(dir + "/" + png);
  };
  run_gnuplot("suite.gp", "suite.png");
  if (results.contains("scaling") && !results["scaling"]["cells"].empty()) {
    // One line per stage: measured (solid) and planned (dashed) parameters against ranks.
    std::map<int, std::vector<const ojson*>> by_stage;
    for (const ojson& c : results["scaling"]["cells"]) by_stage[c["stage"].get<int>()].push_back(&c);
    std::ostringstream sg, sd;
    sg << "set terminal pngcairo size 1000,700 font ',11'\nset output 'scaling.png'\nset grid\nset key top left\n"
       << "set title "
       << quote("largest trainable model within " + results["scaling"]["device_mem_per_rank"].get<std::string>() +
                " of device memory per rank")
       << "\n"
       << "set xlabel 'ranks'\nset ylabel 'parameters (millions)'\nplot ";
    int b = 0;
    for (const auto& [stage, cells] : by_stage) {
      for (const ojson* c : cells)
        sd << (*c)["ranks"].get<int>() << " "
           << ((*c)["measured_params"].is_null() ? std::string("NaN")
                                                 : fmt("%.6g", (*c)["measured_params"].get<double>() / 1e6))
           << " " << fmt("%.6g", (*c)["planned_params"].get<double>() / 1e6) << "\n";
      sd << "\n\n";
      sg << (b ? ", " : "") << "'scaling.dat' index " << b << " using 1:2 with linespoints lw 2 lc " << stage + 1
         << " title 'stage " << stage << " measured', 'scaling.dat' index " << b << " using 1:3 with lines dt 2 lc "
         << stage + 1 << " title 'stage " << stage << " plan'";
      ++b;
    }
    sg << "\n";
    write_text_file(dir + "/scaling.dat", sd.str());
    write_text_file(dir + "/scaling.gp", sg.str());
    run_gnuplot("scaling.gp", "scaling.png");
  }
  return written;
}

}  // namespace strata::bench
