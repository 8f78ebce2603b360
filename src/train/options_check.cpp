// Every TrainOptions value checked against its range in one place. The CLI calls this before
// training and turns a failure into exit status 2; train() calls it too, for in-process callers.
#include <cstdio>
#include <string>

#include "core/error.h"
#include "train/trainer.h"

namespace strata {

namespace {

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

void need(bool ok, const std::string& option, const std::string& value, const std::string& rule) {
  STRATA_CHECK(ok, option + ": " + value + " is out of range: " + rule, "");
}
void at_least(int64_t v, int64_t lo, const char* option) {
  need(v >= lo, option, std::to_string(v), "must be at least " + std::to_string(lo));
}
void one_of(const std::string& v, std::initializer_list<const char*> allowed, const char* option) {
  std::string list;
  for (const char* a : allowed) {
    if (v == a) return;
    list += (list.empty() ? "" : ", ") + std::string(a);
  }
  throw_error(std::string(option) + ": '" + v + "' is not one of " + list, "use one of " + list);
}

}  // namespace

void validate_options(const TrainOptions& o) {
  at_least(o.steps, 1, "--steps");
  at_least(o.micro_batch, 1, "--micro-batch");
  at_least(o.grad_accum, 1, "--grad-accum");
  at_least(o.seq_len, 1, "--seq-len");
  need(o.lr > 0, "--lr", num(o.lr), "must be positive");
  at_least(o.warmup, 0, "--warmup");
  need(o.min_lr_ratio >= 0 && o.min_lr_ratio <= 1, "--min-lr-ratio", num(o.min_lr_ratio), "must be in [0, 1]");
  one_of(o.lr_decay, {"cosine", "linear", "constant"}, "--lr-decay");
  need(o.weight_decay >= 0, "--weight-decay", num(o.weight_decay), "must not be negative");
  need(o.beta1 >= 0 && o.beta1 < 1, "--beta1", num(o.beta1), "must be in [0, 1)");
  need(o.beta2 >= 0 && o.beta2 < 1, "--beta2", num(o.beta2), "must be in [0, 1)");
  need(o.eps > 0, "--eps", num(o.eps), "must be positive");
  need(o.grad_clip >= 0, "--grad-clip", num(o.grad_clip), "must not be negative (0 disables clipping)");
  at_least(o.log_every, 1, "--log-every");
  at_least(o.threads, 0, "--threads");  // 0: all CPUs
  at_least(o.device_threads, 0, "--device-threads");
  at_least(o.host_threads, 0, "--host-threads");
  one_of(o.adam_isa, {"auto", "scalar", "avx2", "avx512"}, "--adam-isa");
  one_of(o.device, {"auto", "cpu", "cuda"}, "--device");
  need(o.device_mem > 0, "--device-mem", std::to_string(o.device_mem), "must be positive");
  need(o.zero_stage >= 0 && o.zero_stage <= 3, "--zero-stage", std::to_string(o.zero_stage), "must be 0, 1, 2 or 3");
  at_least(o.sub_group_size, 1, "--sub-group-size");
  at_least(o.reduce_bucket_size, 1, "--reduce-bucket-size");
  at_least(o.allgather_bucket_size, 1, "--allgather-bucket-size");
  at_least(o.prefetch_depth, 0, "--prefetch-depth");
  at_least(o.prefetch_bucket_size, 0, "--prefetch-bucket-size");
  at_least(o.param_persistence_threshold, 0, "--param-persistence-threshold");
  at_least(o.max_live_params, 0, "--max-live-params");
  at_least(o.hpz_partition_size, 0, "--hpz-partition-size");  // 0: the ranks per node
  need(o.loss_scale >= 0, "--loss-scale", num(o.loss_scale), "must not be negative (0 = dynamic)");
  need(o.initial_scale_power >= 0 && o.initial_scale_power <= 64, "--initial-scale-power",
       std::to_string(o.initial_scale_power), "must be in [0, 64]");
  at_least(o.loss_scale_window, 1, "--loss-scale-window");
  at_least(o.hysteresis, 1, "--hysteresis");
  need(o.min_loss_scale > 0, "--min-loss-scale", num(o.min_loss_scale), "must be positive");
  one_of(o.offload_optimizer, {"none", "cpu", "nvme"}, "--offload-optimizer");
  one_of(o.offload_param, {"none", "cpu", "nvme"}, "--offload-param");
  one_of(o.offload_activations, {"none", "cpu"}, "--offload-activations");
  need(o.aio_queue_depth >= 1 && o.aio_queue_depth <= 4096, "--aio-queue-depth", std::to_string(o.aio_queue_depth),
       "must be in [1, 4096]");
  need(o.aio_block_size >= 4096 && o.aio_block_size % 4096 == 0, "--aio-block-size", std::to_string(o.aio_block_size),
       "must be a positive multiple of 4096 bytes (direct I/O)");
  STRATA_CHECK(o.offload_param == "none" || o.offload_param == o.offload_optimizer,
               "--offload-param " + o.offload_param + " with --offload-optimizer " + o.offload_optimizer,
               "offloaded parameters live where the optimizer that updates them lives: give both the same tier");
  STRATA_CHECK(o.offload_optimizer != "nvme" || !o.nvme_path.empty(), "--offload-optimizer nvme without --nvme-path",
               "give --nvme-path DIR on a local NVMe (or SSD) file system");
  STRATA_CHECK(o.offload_activations == "none" || o.activation_checkpointing,
               "--offload-activations cpu without --activation-checkpointing",
               "the checkpoints are what goes to host RAM: add --activation-checkpointing");
  need(o.offload_ratio >= 0 && o.offload_ratio <= 1, "--offload-ratio", num(o.offload_ratio), "must be in [0, 1]");
  need(o.pin_buffer_count >= 1 && o.pin_buffer_count <= 4096, "--pin-buffer-count", std::to_string(o.pin_buffer_count),
       "must be in [1, 4096]");
  need(o.pin_buffer_size >= 4096, "--pin-buffer-size", std::to_string(o.pin_buffer_size), "must be at least 4096");
  at_least(o.save_every, 0, "--save-every");
  at_least(o.keep_checkpoints, 0, "--keep-checkpoints");
  need(o.comm_timeout > 0, "--comm-timeout", num(o.comm_timeout), "must be positive");
}

}  // namespace strata
