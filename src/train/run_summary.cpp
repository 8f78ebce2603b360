#include "train/run_summary.h"

#include <algorithm>
#include <cmath>
#include <span>

#include "comm/communicator.h"
#include "train/option_registry.h"

namespace strata {

nlohmann::ordered_json summarize_run(const TrainOptions& opts, Communicator* comm, const TrainResult& r,
                                     const ModelSpec& spec, double peak_flops) {
  const int world = comm ? comm->size() : 1;
  const size_t first = r.steps.size() > 1 ? 1 : 0;
  double step_s = 0, overlap = 0;
  uint64_t sent = 0, inter = 0;
  for (size_t i = first; i < r.steps.size(); ++i)
    step_s += r.steps[i].timeline.wall_s, overlap += r.steps[i].timeline.overlap(),
        sent += r.steps[i].timeline.comm_bytes, inter += r.steps[i].timeline.inter_node_bytes;
  const double timed = double(r.steps.size() - first);
  if (timed > 0) step_s /= timed, overlap /= timed;
  // The slowest rank sets the pace; peaks are per rank, so the largest is what must fit.
  double peaks[6] = {step_s,
                     double(r.device_high_water),
                     double(r.host_high_water),
                     double(r.nvme_bytes),
                     timed > 0 ? double(sent) / timed : 0,
                     timed > 0 ? double(inter) / timed : 0};
  if (world > 1) comm->all_reduce(std::span<double>(peaks), ReduceOp::max);
  step_s = peaks[0];
  const double tokens_per_step = double(opts.micro_batch) * opts.grad_accum * world * opts.seq_len;
  const double tokens_per_s = step_s > 0 ? tokens_per_step / step_s : 0;
  const double flops_per_token = spec.training_flops_per_token(opts.seq_len, opts.activation_checkpointing);
  const double flops_per_device = tokens_per_s * flops_per_token / world;
  nlohmann::ordered_json j = {
      {"ok", true},
      {"model", opts.model},
      {"arch", spec.arch()},
      {"params", r.num_params},
      {"n_layer", spec.n_layer()},
      {"n_embd", spec.n_embd()},
      {"ranks", world},
      {"zero_stage", opts.zero_stage},
      {"offload_optimizer", option_value(opts, "offload-optimizer")},
      {"offload_param", option_value(opts, "offload-param")},
      {"activation_checkpointing", opts.activation_checkpointing},
      {"precision", std::string(dtype_name(opts.precision))},
      {"micro_batch", opts.micro_batch},
      {"grad_accum", opts.grad_accum},
      {"seq_len", opts.seq_len},
      {"steps", int64_t(r.steps.size())},
      {"timed_steps", int64_t(timed)},
      {"step_s", step_s},
      {"tokens_per_s", tokens_per_s},
      {"flops_per_token", flops_per_token},
      {"tflops_per_device", flops_per_device * 1e-12},
      {"peak_tflops", peak_flops > 0 ? nlohmann::ordered_json(peak_flops * 1e-12) : nlohmann::ordered_json()},
      {"mfu", peak_flops > 0 ? nlohmann::ordered_json(flops_per_device / peak_flops) : nlohmann::ordered_json()},
      {"peak_bytes", {{"device", peaks[1]}, {"host", peaks[2]}, {"nvme", peaks[3]}}},
      {"comm_bytes_per_step", peaks[4]},
      {"inter_node_bytes_per_step", peaks[5]},
      {"nodes", comm ? comm->nodes() : 1},
      {"overlap", overlap},
      {"loss_first", r.steps.empty() ? 0.0 : r.steps.front().loss},
      {"loss_last", r.steps.empty() ? 0.0 : r.steps.back().loss},
      {"steady_state_allocations", r.steady_state_allocations}};
  // The last validation (--eval-data, --eval-fraction), when one ran.
  double useful = 0;
  for (size_t i = first; i < r.steps.size(); ++i) useful += r.steps[i].useful_tokens_per_s;
  j["useful_tokens_per_s"] = timed > 0 ? useful / timed : 0.0;
  for (auto it = r.steps.rbegin(); it != r.steps.rend(); ++it)
    if (it->evaluated) {
      j["eval_loss"] = it->eval_loss, j["eval_perplexity"] = std::exp(it->eval_loss);
      j["eval_tokens"] = it->eval_tokens, j["eval_s"] = it->eval_s;
      break;
    }
  return j;
}

}  // namespace strata
