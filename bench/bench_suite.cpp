#include "bench/bench_suite.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "backend/device.h"
#include "bench/subprocess.h"
#include "bench/suite_report.h"
#include "bench/suite_spec.h"
#include "core/error.h"
#include "core/parse.h"
#include "core/text_file.h"
#include "model/model_spec.h"
#include "train/planner.h"
#include "train/trainer.h"

namespace strata::bench {

namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

std::string utc_stamp() {
  const std::time_t t = std::time(nullptr);
  std::tm g{};
  gmtime_r(&t, &g);
  char b[32];
  std::strftime(b, sizeof b, "%Y-%m-%dT%H-%M-%SZ", &g);
  return b;
}

// A /proc/meminfo or /proc/cpuinfo field ("" when absent).
std::string proc_field(const char* file, const std::string& key) {
  std::ifstream f(file);
  for (std::string line; std::getline(f, line);)
    if (line.rfind(key, 0) == 0) {
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      const size_t v = line.find_first_not_of(" \t", colon + 1);
      return v == std::string::npos ? "" : line.substr(v);
    }
  return "";
}

double mem_available_bytes() {
  const std::string v = proc_field("/proc/meminfo", "MemAvailable");
  return v.empty() ? 0 : std::atof(v.c_str()) * 1024;
}

std::string gb(double bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g GB", bytes / 1e9);
  return b;
}

// The plan's row for a run's stage, offload and checkpointing (the suite expands only
// combinations the plan has).
const PlanRow& plan_row(const std::vector<PlanRow>& rows, int stage, const std::string& offload, bool ckpt) {
  const PlanRow* r = find_plan_row(rows, stage, offload, ckpt);
  STRATA_CHECK(r, "no plan row for stage " + std::to_string(stage) + " offload " + offload, "internal error");
  return *r;
}

enum class Outcome { ok, out_of_memory, failed, skipped };
const char* outcome_name(Outcome o) {
  return o == Outcome::ok              ? "ok"
         : o == Outcome::out_of_memory ? "out_of_memory"
         : o == Outcome::failed        ? "failed"
                                       : "skipped";
}

// Runs suite entries as `strata train --summary` processes (under mpirun for several ranks)
// and records each with the plan's prediction beside what it measured.
class Runner {
 public:
  Runner(const SuiteOptions& o, std::string dir) : o_(o), dir_(std::move(dir)) {
    self_ = fs::read_symlink("/proc/self/exe").string();
    fs::create_directories(dir_ + "/logs");
    fs::create_directories(dir_ + "/runs");
    nvme_path_ = o.nvme_path.empty() ? dir_ + "/nvme" : o.nvme_path;
    cpus_ = int(std::max(1u, std::thread::hardware_concurrency()));
    host_total_ = o.host_mem.empty() ? mem_available_bytes() : 0;
    if (!o.host_mem.empty()) host_per_rank_ = parse_bytes(o.host_mem, "--host-mem");
  }
  const std::string& nvme_path() const { return nvme_path_; }
  int threads_per_rank(int ranks) const { return std::max(1, cpus_ / ranks); }
  int cpus() const { return cpus_; }
  // What strata plan is asked about run r (per rank: the device and host budgets).
  PlanInput plan_input(const SuiteRun& r, const ModelSpec& spec) const {
    PlanInput in = plan_input_for(spec, r.ranks);
    in.mixed = r.precision != "f32";
    in.micro_batch = r.micro_batch, in.seq_len = r.seq_len;
    in.device_bytes = double(parse_bytes(r.device_mem, "device_mem"));
    in.host_bytes = host_budget(r.ranks);
    in.threads = threads_per_rank(r.ranks);
    in.device = resolve_device(o_.device);  // the plan charges that backend's op scratch
    in.reduce_bucket = r.reduce_bucket_size, in.allgather_bucket = r.allgather_bucket_size;
    in.persistence_threshold = r.param_persistence_threshold;
    return in;
  }

  // One run. honour_plan: skip (with the plan's numbers) what the planner says cannot fit.
  ojson run(const SuiteRun& r, const std::string& model_path, bool honour_plan, Outcome& outcome) {
    const ModelSpec spec = ModelSpec::load(model_path);
    PlanInput in = plan_input(r, spec);
    const double host = in.host_bytes;
    if (r.offload.starts_with("nvme")) {
      fs::create_directories(nvme_path_);
      in.nvme_bytes = double(fs::space(nvme_path_).available) / r.ranks;
    }
    const std::vector<PlanRow> rows = make_plan(in);
    const PlanRow& p = plan_row(rows, r.stage, r.offload, r.checkpointing);
    ojson rec = {{"sweep", r.sweep},
                 {"model", r.model},
                 {"params", spec.num_params()},
                 {"n_layer", spec.n_layer()},
                 {"n_embd", spec.n_embd()},
                 {"stage", r.stage},
                 {"offload", r.offload},
                 {"checkpointing", r.checkpointing},
                 {"ranks", r.ranks},
                 {"precision", r.precision},
                 {"micro_batch", r.micro_batch},
                 {"seq_len", r.seq_len},
                 {"device_mem", r.device_mem},
                 {"reduce_bucket_size", r.reduce_bucket_size},
                 {"allgather_bucket_size", r.allgather_bucket_size},
                 {"param_persistence_threshold", r.param_persistence_threshold},
                 {"plan", {{"device", p.device}, {"host", p.host}, {"nvme", p.nvme}, {"fits", p.fits}}}};
    if (honour_plan && !p.fits) {
      std::string why;
      auto over = [&](const char* tier, double need, double have) {
        if (have > 0 && need > have)
          why += std::string(why.empty() ? "" : "; ") + tier + " " + gb(need) + " > " + gb(have);
      };
      over("device", p.device, in.device_bytes), over("host", p.host, in.host_bytes),
          over("nvme", p.nvme, in.nvme_bytes);
      rec["status"] = "skipped", rec["reason"] = "plan per rank: " + why;
      outcome = Outcome::skipped;
      return rec;
    }
    const std::string tag = tag_for(r, spec);
    const std::string summary = dir_ + "/runs/" + tag + ".json", log = dir_ + "/logs/" + tag + ".log";
    std::vector<std::string> a;
    if (r.ranks > 1) {
      a = {o_.mpirun, "-np", std::to_string(r.ranks), "--oversubscribe", "--bind-to", "none"};
      if (geteuid() == 0) a.push_back("--allow-run-as-root");
    }
    const int threads = threads_per_rank(r.ranks);
    for (const std::string& s : {self_,
                                 std::string("train"),
                                 std::string("--model"),
                                 model_path,
                                 std::string("--zero-stage"),
                                 std::to_string(r.stage),
                                 std::string("--precision"),
                                 r.precision,
                                 std::string("--micro-batch"),
                                 std::to_string(r.micro_batch),
                                 std::string("--seq-len"),
                                 std::to_string(r.seq_len),
                                 std::string("--steps"),
                                 std::to_string(r.steps),
                                 std::string("--warmup"),
                                 std::string("1"),
                                 std::string("--log-every"),
                                 std::to_string(r.steps),
                                 std::string("--device"),
                                 o_.device,
                                 std::string("--device-mem"),
                                 r.device_mem,
                                 std::string("--host-mem"),
                                 std::to_string(int64_t(host)),
                                 std::string("--threads"),
                                 std::to_string(threads),
                                 std::string("--comm-timeout"),
                                 std::string("120"),
                                 std::string("--reduce-bucket-size"),
                                 std::to_string(r.reduce_bucket_size),
                                 std::string("--allgather-bucket-size"),
                                 std::to_string(r.allgather_bucket_size),
                                 std::string("--param-persistence-threshold"),
                                 std::to_string(r.param_persistence_threshold),
                                 std::string("--out"),
                                 dir_ + "/runs/" + tag,
                                 std::string("--summary"),
                                 summary})
      a.push_back(s);
    if (r.checkpointing) a.push_back("--activation-checkpointing");
    if (r.offload != "none") {
      const std::string tier = r.offload.substr(0, r.offload.find('+'));
      a.insert(a.end(), {"--offload-optimizer", tier});
      if (r.offload.ends_with("+param")) a.insert(a.end(), {"--offload-param", tier});
      if (tier == "nvme") fs::create_directories(nvme_path_), a.insert(a.end(), {"--nvme-path", nvme_path_});
    }
    if (o_.peak_tflops > 0) a.insert(a.end(), {"--peak-tflops", std::to_string(o_.peak_tflops)});
    std::remove(summary.c_str());
    const ProcessResult pr = run_logged(a, log, o_.run_timeout);
    rec["command"] = shell_line(a);
    rec["wall_s"] = pr.seconds;
    rec["log"] = fs::relative(log, dir_).string();
    if (pr.exit_code == 0 && fs::exists(summary)) {
      rec["status"] = "ok";
      rec["result"] = ojson::parse(read_text_file(summary));
      outcome = Outcome::ok;
      fs::remove_all(dir_ + "/runs/" + tag);  // the run's metrics and checkpoints: the summary keeps what counts
      return rec;
    }
    const std::string text = fs::exists(log) ? read_text_file(log) : "";
    std::string message;
    for (size_t pos = 0; pos < text.size();) {
      const size_t end = std::min(text.find('\n', pos), text.size());
      const std::string line = text.substr(pos, end - pos);
      if (line.find("error") != std::string::npos) {
        message = line.substr(0, 400);
        break;
      }
      pos = end + 1;
    }
    if (pr.timed_out) message = "timed out after " + std::to_string(int(o_.run_timeout)) + " s";
    if (message.empty()) message = "exit code " + std::to_string(pr.exit_code);
    outcome = text.find("memory budget exceeded") != std::string::npos && !pr.timed_out ? Outcome::out_of_memory
                                                                                        : Outcome::failed;
    rec["status"] = outcome_name(outcome), rec["error"] = message;
    return rec;
  }

 private:
  double host_budget(int ranks) const { return host_per_rank_ > 0 ? host_per_rank_ : host_total_ / ranks; }
  std::string tag_for(const SuiteRun& r, const ModelSpec& spec) {
    std::string name = fs::path(r.model).stem().string();
    std::string t = std::to_string(++count_) + "-" + r.sweep + "-" + name + "-L" + std::to_string(spec.n_layer()) +
                    "-s" + std::to_string(r.stage) + "-" + r.offload + (r.checkpointing ? "-ckpt" : "") + "-n" +
                    std::to_string(r.ranks);
    for (char& c : t)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.') c = '_';
    return t;
  }

  const SuiteOptions& o_;
  std::string dir_, self_, nvme_path_;
  int cpus_ = 1, count_ = 0;
  double host_total_ = 0, host_per_rank_ = 0;
};

std::string one_line(const ojson& rec) {
  char b[512];
  const std::string what = rec["model"].get<std::string>() + " stage " + std::to_string(rec["stage"].get<int>()) + " " +
                           rec["offload"].get<std::string>() + (rec["checkpointing"].get<bool>() ? " ckpt" : "") +
                           " ranks " + std::to_string(rec["ranks"].get<int>());
  const std::string status = rec["status"].get<std::string>();
  if (status == "ok") {
    const ojson& s = rec["result"];
    std::snprintf(b, sizeof b, "%-48s %9.0f tok/s %8.4f TFLOP/s/dev  device %.3g GB (plan %.3g)  %.1f s", what.c_str(),
                  s["tokens_per_s"].get<double>(), s["tflops_per_device"].get<double>(),
                  s["peak_bytes"]["device"].get<double>() / 1e9, rec["plan"]["device"].get<double>() / 1e9,
                  rec["wall_s"].get<double>());
  } else {
    const std::string why = rec.contains("reason") ? rec["reason"].get<std::string>() : rec["error"].get<std::string>();
    std::snprintf(b, sizeof b, "%-48s %s: %s", what.c_str(), status.c_str(), why.c_str());
  }
  return b;
}

// The scaling family's config with n_layer layers, written once into dir.
std::string family_config(const ScalingSpec& s, int layers, const std::string& dir) {
  const std::string path = dir + "/gpt-c" + std::to_string(s.n_embd) + "-l" + std::to_string(layers) + ".json";
  if (!fs::exists(path)) {
    const ojson j = {{"comment", "strata bench suite: the scaling family (only n_layer varies)"},
                     {"n_layer", layers},
                     {"n_head", s.n_head},
                     {"n_embd", s.n_embd},
                     {"vocab_size", s.vocab_size},
                     {"n_positions", s.n_positions}};
    write_text_file(path, j.dump(2) + "\n");
  }
  return path;
}

// The largest model of the family that trains within the budget: the plan's prediction
// first, then probes up (doubling the step) until a run does not fit, and a bisection.
ojson scaling_cell(Runner& runner, const ScalingSpec& s, int stage, int ranks, const std::string& models_dir) {
  SuiteRun base;
  static_cast<RunSettings&>(base) = s;
  base.sweep = "scaling", base.stage = stage, base.ranks = ranks;
  int planned = 0;
  for (int L = 1; L <= s.max_layers; ++L) {
    const PlanInput in = runner.plan_input(base, ModelSpec::load(family_config(s, L, models_dir)));
    if (!plan_row(make_plan(in), stage, "none", false).fits) break;
    planned = L;
  }
  ojson probes = ojson::array();
  std::string error;
  auto fits = [&](int L) -> std::optional<bool> {
    SuiteRun r = base;
    r.model = family_config(s, L, models_dir);
    Outcome out;
    ojson rec = runner.run(r, r.model, false, out);
    ojson p = {{"layers", L}, {"status", rec["status"]}, {"wall_s", rec.value("wall_s", 0.0)}};
    if (out == Outcome::ok) p["peak_device"] = rec["result"]["peak_bytes"]["device"];
    if (out == Outcome::failed) error = rec["error"].get<std::string>();
    probes.push_back(p);
    if (out == Outcome::failed) return std::nullopt;
    return out == Outcome::ok;
  };
  int lo = 0, hi = s.max_layers + 1;  // lo trains (0: none known), hi does not
  bool failed = false;
  // One run at L layers narrows [lo, hi); false once a run failed for another reason.
  auto probe = [&](int layers) {
    const auto f = fits(layers);
    if (!f) return !(failed = true);
    (*f ? lo : hi) = layers;
    return true;
  };
  const int max = s.max_layers;
  // From the plan's answer, gallop (steps 1, 2, 4, ...) towards the boundary, then bisect.
  if (probe(std::clamp(planned, 1, max))) {
    const bool up = lo > 0;
    for (int step = 1; up ? lo < max && hi > max : lo == 0 && hi > 1; step *= 2)
      if (!probe(up ? std::min(max, lo + step) : std::max(1, hi - step))) break;
  }
  while (!failed && lo > 0 && hi - lo > 1)
    if (!probe((lo + hi) / 2)) break;
  auto params = [&](int layers) {
    return layers > 0 ? ojson(ModelSpec::load(family_config(s, layers, models_dir)).num_params()) : ojson(0);
  };
  ojson cell = {{"stage", stage},
                {"ranks", ranks},
                {"device_mem", s.device_mem},
                {"planned_layers", planned},
                {"planned_params", params(planned)},
                {"measured_layers", failed ? ojson() : ojson(lo)},
                {"measured_params", failed ? ojson() : params(lo)},
                {"capped", !failed && lo == s.max_layers},
                {"probes", probes}};
  if (failed) cell["error"] = error;
  return cell;
}

}  // namespace

int run_suite(const SuiteOptions& o) {
  const std::string suite_path = resolve_resource(o.suite);
  const std::string mode = o.quick ? "quick" : "full";
  const SuiteSpec spec = load_suite(suite_path, mode);
  // Fail before hours of runs, not after: the plots need gnuplot.
  STRATA_CHECK(std::system("gnuplot -e 'set terminal pngcairo' >/dev/null 2>&1") == 0,
               "gnuplot with the pngcairo terminal is not available (the suite's PNG plots need it)",
               "apt-get install gnuplot-nox");
  const std::string stamp = utc_stamp();
  const std::string dir = o.out + "/" + stamp;
  STRATA_CHECK(!fs::exists(dir), "results directory '" + dir + "' already exists", "wait a second and run again");
  fs::create_directories(dir);
  Runner runner(o, dir);
  ojson results = {{"bench", "suite"},
                   {"mode", mode},
                   {"suite", suite_path},
                   {"started_utc", stamp},
                   {"machine",
                    {{"cpus", runner.cpus()},
                     {"cpu", proc_field("/proc/cpuinfo", "model name")},
                     {"mem_total", proc_field("/proc/meminfo", "MemTotal")},
                     {"device", "cpu backend"},
                     {"peak_tflops", o.peak_tflops > 0 ? ojson(o.peak_tflops) : ojson()}}},
                   {"flops_per_token",
                    "(3 + r)·(2·matmul_params + 4·n_layer·seq_len·n_embd), r = 1 with activation checkpointing "
                    "(recomputation) else 0; TFLOP/s per device = tokens/s · flops_per_token / ranks"},
                   {"runs", ojson::array()}};
  auto save = [&] { write_text_file(dir + "/results.json", results.dump(2) + "\n"); };
  std::printf("bench suite (%s): %zu runs%s; results in %s\n", mode.c_str(), spec.runs.size(),
              spec.scaling.enabled ? " + the scaling search" : "", dir.c_str());
  std::fflush(stdout);
  int n_ok = 0, n_skipped = 0, n_failed = 0, n_oom = 0, i = 0;
  for (const SuiteRun& r : spec.runs) {
    Outcome out;
    ojson rec = runner.run(r, resolve_model(r.model), true, out);
    (out == Outcome::ok ? n_ok : out == Outcome::skipped ? n_skipped : out == Outcome::failed ? n_failed : n_oom)++;
    std::printf("[%d/%zu] %s\n", ++i, spec.runs.size(), one_line(rec).c_str());
    std::fflush(stdout);
    results["runs"].push_back(std::move(rec));
    save();
  }
  if (spec.scaling.enabled) {
    const ScalingSpec& s = spec.scaling;
    const std::string models = dir + "/scaling-models";
    fs::create_directories(models);
    results["scaling"] = {
        {"family",
         {{"n_embd", s.n_embd}, {"n_head", s.n_head}, {"vocab_size", s.vocab_size}, {"n_positions", s.n_positions}}},
        {"device_mem_per_rank", s.device_mem},
        {"precision", s.precision},
        {"micro_batch", s.micro_batch},
        {"seq_len", s.seq_len},
        {"max_layers", s.max_layers},
        {"reduce_bucket_size", s.reduce_bucket_size},
        {"param_persistence_threshold", s.param_persistence_threshold},
        {"cells", ojson::array()}};
    std::printf("scaling: largest model (n_embd %d) within %s of device memory per rank\n", s.n_embd,
                s.device_mem.c_str());
    for (int stage : s.stages)
      for (int ranks : s.ranks) {
        ojson cell = scaling_cell(runner, s, stage, ranks, models);
        const bool bad = cell.contains("error");
        n_failed += bad;
        std::printf(
            "  stage %d, %d rank(s): measured %s layers (%s params), plan %d layers (%.3gM params), %zu runs%s\n",
            stage, ranks, bad ? "?" : std::to_string(cell["measured_layers"].get<int>()).c_str(),
            bad ? "?" : (std::to_string(cell["measured_params"].get<int64_t>() / 1000) + "k").c_str(),
            cell["planned_layers"].get<int>(), cell["planned_params"].get<double>() / 1e6, cell["probes"].size(),
            bad ? (" — " + cell["error"].get<std::string>()).c_str() : "");
        std::fflush(stdout);
        results["scaling"]["cells"].push_back(std::move(cell));
        save();
      }
  }
  write_markdown(dir, results);
  const std::vector<std::string> pngs = write_plots(dir, results);
  std::printf("wrote %s/results.json, results.md", dir.c_str());
  for (const std::string& p : pngs) std::printf(", %s", p.c_str());
  std::printf("\n");
  const ojson line = {{"bench", "suite"},     {"mode", mode},           {"dir", dir},        {"ok", n_ok},
                      {"skipped", n_skipped}, {"out_of_memory", n_oom}, {"failed", n_failed}};
  std::printf("%s\n", line.dump().c_str());
  return n_failed ? 1 : 0;
}

}  // namespace strata::bench
