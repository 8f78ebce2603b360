// Packed rows: several records in one row, each with positions from 0. The CPU ops with
// positions against the same records run alone (attention, RoPE, the position embedding),
// and whole models: a packed micro-batch's logits and gradients against the same records one
// per row, on GPT-2 and Llama, to f32 rounding.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <vector>

#include "core/rng.h"
#include "cpu/cpu_backend.h"
#include "model/gpt2.h"
#include "model/llama.h"
#include "test_util.h"

namespace strata {
namespace {

using test::randn;

// Positions for records of these lengths, in order, filling one row of T (the rest one more
// record: padding).
std::vector<int32_t> positions_of(const std::vector<int>& lengths, int T) {
  std::vector<int32_t> pos;
  for (int n : lengths)
    for (int p = 0; p < n; ++p) pos.push_back(p);
  for (int p = 0; int(pos.size()) < T; ++p) pos.push_back(p);
  return pos;
}

// Rows [first, first+n) of a [T, W] matrix.
std::vector<float> rows(const std::vector<float>& x, int first, int n, int W) {
  return {x.begin() + int64_t(first) * W, x.begin() + int64_t(first + n) * W};
}

// Attention over a packed row equals each record's attention alone, forward (out, lse) and
// backward (dqkv), bit for bit: the CPU op runs each record as its own causal block.
TEST(PackedRows, AttentionEqualsEachRecordAlone) {
  const int T = 150, NH = 2, hd = 16, C = NH * hd;
  const std::vector<int> lengths = {1, 40, 70, 9};  // then 30 of padding
  const std::vector<int32_t> pos = positions_of(lengths, T);
  for (int window : {0, 5}) {
    SCOPED_TRACE("window " + std::to_string(window));
    cpu::CpuBackend be({size_t(64) << 20, 0});
    const auto qkv = randn(size_t(T) * 3 * C, 11), dout = randn(size_t(T) * C, 12);
    std::vector<float> out(size_t(T) * C), lse(size_t(NH) * T), dqkv(qkv.size());
    auto attend = [&](std::vector<float>& o, std::vector<float>& l, std::vector<float>& d, const std::vector<float>& x,
                      const std::vector<float>& dy, int n, std::span<const int32_t> p) {
      TensorView qv{const_cast<float*>(x.data()), DType::f32, {1, n, 3 * C}}, ov{o.data(), DType::f32, {1, n, C}},
          lv{l.data(), DType::f32, {1, NH, n}};
      be.attention_forward(ov, lv, qv, NH, {}, {window}, p);
      be.attention_backward({d.data(), DType::f32, {1, n, 3 * C}},
                            {const_cast<float*>(dy.data()), DType::f32, {1, n, C}}, qv, ov, lv, NH, {}, {window}, p);
    };
    attend(out, lse, dqkv, qkv, dout, T, pos);
    int first = 0;
    for (int n : std::vector<int>{1, 40, 70, 9, 30}) {
      std::vector<float> o(size_t(n) * C), l(size_t(NH) * n), d(size_t(n) * 3 * C);
      attend(o, l, d, rows(qkv, first, n, 3 * C), rows(dout, first, n, C), n, {});
      EXPECT_EQ(o, rows(out, first, n, C)) << "record at " << first;
      EXPECT_EQ(d, rows(dqkv, first, n, 3 * C)) << "record at " << first;
      for (int h = 0; h < NH; ++h)
        for (int t = 0; t < n; ++t) EXPECT_EQ(l[size_t(h * n + t)], lse[size_t(h * T + first + t)]);
      first += n;
    }
  }
}

// RoPE and GPT-2's position embedding read a token's position in its record.
TEST(PackedRows, RopeAndPositionEmbeddingReadEachRecordsPositions) {
  const int T = 12, W = 16, V = 5;
  const std::vector<int32_t> pos = positions_of({4, 5}, T);  // then 3 of padding
  cpu::CpuBackend be({size_t(16) << 20, 0});
  const auto x = randn(size_t(T) * W, 3);
  std::vector<float> packed = x;
  be.rope({packed.data(), DType::f32, {1, T, W}}, 0, 2, 8, RopeSpec{}, false, pos);
  int first = 0;
  for (int n : {4, 5, 3}) {
    std::vector<float> alone = rows(x, first, n, W);
    be.rope({alone.data(), DType::f32, {1, n, W}}, 0, 2, 8, RopeSpec{}, false);
    EXPECT_EQ(alone, rows(packed, first, n, W)) << "record at " << first;
    first += n;
  }
  const auto wte = randn(size_t(V) * W, 4), wpe = randn(size_t(T) * W, 5);
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2};
  std::vector<float> out(size_t(T) * W);
  be.encoder_forward({out.data(), DType::f32, {1, T, W}}, tokens, {const_cast<float*>(wte.data()), DType::f32, {V, W}},
                     {const_cast<float*>(wpe.data()), DType::f32, {T, W}}, pos);
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < W; ++c)
      EXPECT_EQ(out[size_t(t * W + c)], wte[size_t(tokens[size_t(t)] * W + c)] + wpe[size_t(pos[size_t(t)] * W + c)]);
  std::vector<float> dwte(wte.size()), dwpe(wpe.size());
  be.encoder_backward({dwte.data(), DType::f32, {V, W}}, {dwpe.data(), DType::f32, {T, W}},
                      {out.data(), DType::f32, {1, T, W}}, tokens, pos);
  for (int c = 0; c < W; ++c) {  // position 0 gets the first token of each of the three records
    const float want = out[size_t(0 * W + c)] + out[size_t(4 * W + c)] + out[size_t(9 * W + c)];
    EXPECT_FLOAT_EQ(dwpe[size_t(c)], want);
    EXPECT_EQ(dwpe[size_t((T - 1) * W + c)], 0.0f);  // no record reaches position T-1
  }
}

TEST(PackedRows, PositionsThatDoNotCountUpAreRefused) {
  cpu::CpuBackend be({size_t(16) << 20, 0});
  std::vector<float> x(64);
  const std::vector<int32_t> bad = {0, 1, 3, 4};
  const std::string msg = test::error_of([&] {
    be.rope({x.data(), DType::f32, {1, 4, 16}}, 0, 2, 8, RopeSpec{}, false, bad);
  });
  EXPECT_NE(msg.find("position 3 at row 0, token 2 neither starts a record (0) nor follows 1"), std::string::npos)
      << msg;
  const std::vector<int32_t> short_ = {0, 1};
  EXPECT_NE(test::error_of([&] {
              be.rope({x.data(), DType::f32, {1, 4, 16}}, 0, 2, 8, RopeSpec{}, false, short_);
            }).find("2 positions for 1 rows of 4"),
            std::string::npos);
}

// A model's packed micro-batch against the same records one per row: every record's logits
// and the mean loss's gradients agree to f32 rounding.
template <typename M, typename Config>
void expect_packed_equals_alone(const Config& cfg, int vocab, int padded_vocab, const char* what) {
  SCOPED_TRACE(what);
  const int T = 16;
  const std::vector<int> lengths = {5, 7, 3};  // then 1 of padding
  const std::vector<int32_t> pos = positions_of(lengths, T);
  Rng rng(5, 1);
  std::vector<int32_t> tokens(static_cast<size_t>(T)), targets(static_cast<size_t>(T));
  for (int t = 0; t < T; ++t) tokens[size_t(t)] = int32_t(rng.below(uint64_t(vocab)));
  for (int t = 0; t < T; ++t) targets[size_t(t)] = t % 5 == 1 || t >= 15 ? -1 : int32_t(rng.below(uint64_t(vocab)));
  // The same records, one per row of T, padded with masked targets.
  const int B = int(lengths.size());
  std::vector<int32_t> tok_rows(size_t(B) * T, 0), tgt_rows(size_t(B) * T, -1);
  for (int r = 0, first = 0; r < B; first += lengths[size_t(r)], ++r)
    for (int j = 0; j < lengths[size_t(r)]; ++j) {
      tok_rows[size_t(r * T + j)] = tokens[size_t(first + j)];
      tgt_rows[size_t(r * T + j)] = targets[size_t(first + j)];
    }
  cpu::CpuBackend be({size_t(1) << 30, 0});
  M packed(be, cfg, 1, T, DType::f32), alone(be, cfg, B, T, DType::f32);
  packed.init_weights(9), alone.init_weights(9);
  packed.zero_grad(), alone.zero_grad();
  packed.forward(tokens, pos);
  alone.forward(tok_rows);
  std::vector<float> lp(size_t(T) * padded_vocab), la(size_t(B) * T * padded_vocab);
  be.download(lp.data(), packed.logits().data, lp.size() * 4);
  be.download(la.data(), alone.logits().data, la.size() * 4);
  for (int r = 0, first = 0; r < B; first += lengths[size_t(r)], ++r)
    test::expect_close(lp.data() + int64_t(first) * padded_vocab, la.data() + int64_t(r) * T * padded_vocab,
                       size_t(lengths[size_t(r)]) * size_t(padded_vocab), 2e-6, 2e-5, "a record's logits");
  const double loss_p = backward_loss(packed, targets, 1.0f), loss_a = backward_loss(alone, tgt_rows, 1.0f);
  EXPECT_NEAR(loss_p, loss_a, 1e-6 * std::fabs(loss_a));
  std::vector<float> gp(size_t(packed.num_params())), ga(gp.size());
  be.download(gp.data(), packed.grad_flat().data, gp.size() * 4);
  be.download(ga.data(), alone.grad_flat().data, ga.size() * 4);
  double peak = 0;
  for (float g : ga) peak = std::max(peak, double(std::fabs(g)));
  test::expect_close(gp.data(), ga.data(), gp.size(), 1e-6 * peak, 1e-4, "gradients");
}

TEST(PackedRows, Gpt2PackedBatchEqualsRecordsOneToARow) {
  GPT2Config cfg = test::tiny_config();
  expect_packed_equals_alone<GPT2>(cfg, cfg.vocab_size, cfg.padded_vocab_size, "GPT-2");
}

TEST(PackedRows, LlamaPackedBatchEqualsRecordsOneToARow) {
  std::ifstream f(test::source_path("configs/llama-tiny.json"));
  std::stringstream ss;
  ss << f.rdbuf();
  const LlamaConfig cfg = LlamaConfig::from_json_text(ss.str(), "configs/llama-tiny.json");
  expect_packed_equals_alone<Llama>(cfg, cfg.vocab_size, cfg.padded_vocab_size, "Llama");
}

}  // namespace
}  // namespace strata
