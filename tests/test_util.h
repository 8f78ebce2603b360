// Helpers shared by the tests: tiny models, reference losses, tolerance checks that report
// the worst element (never only norms).
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "model/gpt2.h"
#include "train/option_registry.h"

namespace strata::test {

// n normal values times scale, from (seed, 0): the same inputs on every run.
inline std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.0f) {
  NormalRng r(seed, 0);
  std::vector<float> v(n);
  for (auto& x : v) x = scale * r.next();
  return v;
}

inline std::string source_path(const std::string& rel) { return std::string(STRATA_SOURCE_DIR) + "/" + rel; }

// Writes `bytes` to a file `name` in this process's scratch directory for `suite` (under the
// system temporary directory) and returns its path.
inline std::string write_temp_file(const std::string& suite, const std::string& name, const std::string& bytes) {
  const auto dir = std::filesystem::temp_directory_path() / ("strata_test_" + suite + "_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / name).string();
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// Sets `strata train` option `name` (without "--") as typed: the registry parses it, as the
// command line does.
inline void set_option(TrainOptions& o, std::string_view name, const std::string& value) {
  const TrainOption* d = find_train_option(name);
  if (!d) throw Error("no option --" + std::string(name), "a test names an option strata train does not have");
  d->set(o, value);
}

// A run on `comm`'s ranks, each training its slice of the global batch, or on this rank
// alone (null), keeping the final parameters to compare unless `keep` is false.
inline TrainResult train_on(Communicator* comm, const TrainOptions& o, bool keep = true) {
  TrainContext c;
  c.comm = comm, c.keep_final_params = keep;
  return train(o, c);
}

// The message of the strata::Error that f throws, or "(no error)".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

inline GPT2Config tiny_config() { return GPT2Config::load(source_path("configs/gpt2-tiny.json")); }

// Mean cross-entropy of f32 logits [N, Vp] over the first V columns, in double.
inline double reference_loss(const float* logits, const std::vector<int32_t>& targets, int V, int Vp) {
  double total = 0;
  int count = 0;
  for (size_t n = 0; n < targets.size(); ++n) {
    if (targets[n] < 0) continue;
    const float* row = logits + n * size_t(Vp);
    double mx = -1e300;
    for (int v = 0; v < V; ++v) mx = std::max(mx, double(row[v]));
    double s = 0;
    for (int v = 0; v < V; ++v) s += std::exp(double(row[v]) - mx);
    total += mx + std::log(s) - double(row[targets[n]]);
    ++count;
  }
  return count ? total / count : 0;
}

inline std::vector<int32_t> random_tokens(size_t n, int vocab, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(rng.below(uint64_t(vocab)));
  return t;
}

// |a - b| <= atol + rtol * |b| element-wise; reports the worst element by name and index.
inline void expect_close(const float* a, const float* b, size_t n, double atol, double rtol, const std::string& what) {
  double worst = 0;
  size_t worst_i = 0, bad = 0;
  for (size_t i = 0; i < n; ++i) {
    const double err = std::fabs(double(a[i]) - double(b[i]));
    const double excess = err - (atol + rtol * std::fabs(double(b[i])));
    if (!(excess <= 0)) ++bad;
    if (!(excess <= worst)) worst = excess, worst_i = i;
  }
  double se = 0, sr = 0;
  for (size_t i = 0; i < n; ++i) se += (double(a[i]) - b[i]) * (double(a[i]) - b[i]), sr += double(b[i]) * b[i];
  EXPECT_EQ(bad, 0u) << what << " (relative rms error " << std::sqrt(se / std::max(sr, 1e-300)) << ")"
                     << ": " << bad << " of " << n << " elements out of tolerance (atol " << atol << ", rtol " << rtol
                     << "); worst at [" << worst_i << "]: got " << a[worst_i] << ", expected " << b[worst_i];
}

// Every parameter's gradient from model.backward() against central finite differences of
// the reference loss, at the weights in the model's f32 master: B×T random tokens with one
// target masked, h = 1e-2, per element |g - fd| <= 2e-4 + 2e-2·|fd| (the argument is in
// test_gpt2_grad.cpp). V is the vocabulary, Vp its padded width in the logits.
// Device memory belongs to the backend (the host may not address it): tests read and write a
// model's buffers by copies.
inline std::vector<float> download_f32(Backend& be, TensorView v) {
  std::vector<float> out(size_t(v.numel()));
  be.download(out.data(), v.data, out.size() * 4);
  return out;
}

// (A smaller h for models more curved at their weights: the truncation error goes as h².)
inline void expect_gradients_match_finite_differences(Model& model, int B, int T, int V, int Vp,
                                                      const std::string& what, float h = 1e-2f) {
  Backend& be = model.backend();
  float* p = model.master_flat().as<float>();  // a device address: written by upload only
  auto tokens = random_tokens(size_t(B * T), V, 1);
  auto targets = random_tokens(size_t(B * T), V, 2);
  targets[3] = -1;  // a masked position must contribute nothing

  model.zero_grad();
  model.forward(tokens);
  const double loss0 = reference_loss(download_f32(be, model.logits()).data(), targets, V, Vp);
  const double loss_bw = backward_loss(model, targets, 1.0f);
  EXPECT_NEAR(loss_bw, loss0, 1e-5 * loss0);
  const std::vector<float> grad = download_f32(be, model.grad_flat());
  const std::vector<float> master = download_f32(be, model.master_flat());

  auto loss_at = [&]() {
    model.forward(tokens);
    return reference_loss(download_f32(be, model.logits()).data(), targets, V, Vp);
  };
  auto set = [&](int64_t at, float value) { be.upload(p + at, &value, 4); };
  for (size_t k = 0; k < model.param_specs().size(); ++k) {
    const auto& spec = model.param_specs()[k];
    const int64_t off = model.param_offset(int(k)), n = spec.shape.numel();
    std::vector<float> fd(static_cast<size_t>(n)), an(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const float saved = master[size_t(off + i)];
      set(off + i, saved + h);
      const double up = loss_at();
      set(off + i, saved - h);
      const double down = loss_at();
      set(off + i, saved);
      fd[size_t(i)] = float((up - down) / (2.0 * double(h)));
      an[size_t(i)] = grad[size_t(off + i)];
    }
    expect_close(an.data(), fd.data(), size_t(n), 2e-4, 2e-2, what + "gradient of " + spec.name);
  }
}

}  // namespace strata::test
