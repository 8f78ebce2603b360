// strata plan with --lora-rank: every row trains low-rank adapters over frozen weights. The
// tier totals are what a run allocates: the adapters' engine buffers and the frozen
// weights' (stage 3) from zero::plan_engine, the model's and the adapters' own buffers from
// model_device_bytes and LoraAdapters::device_bytes (each checked against the allocation on
// every run), plus the op scratch bound and, when anything is offloaded, the staging buffers.
#include <algorithm>

#include "backend/device.h"
#include "core/error.h"
#include "model/lora_adapters.h"
#include "model/model_factory.h"
#include "train/planner.h"
#include "zero/engine_plan.h"

namespace strata {

namespace {

zero::StepTraffic operator+(zero::StepTraffic a, const zero::StepTraffic& b) {
  a.d2h += b.d2h, a.h2d += b.h2d, a.n2h += b.n2h, a.h2n += b.h2n;
  a.min_d2h += b.min_d2h, a.min_h2d += b.min_h2d, a.min_n2h += b.min_n2h, a.min_h2n += b.min_h2n;
  return a;
}

}  // namespace

std::vector<PlanRow> make_lora_plan(const PlanInput& in) {
  STRATA_CHECK(in.model.has_value(), "a LoRA plan without a model", "give --model: the adapters' shapes come from it");
  const ModelSpec& spec = *in.model;
  const int N = in.ranks, units = spec.n_layer() + 2;
  const DType dt = in.mixed ? DType::bf16 : DType::f32;
  const double elem = double(dtype_size(dt)), tokens = double(in.micro_batch) * in.seq_len;
  const std::vector<LoraTarget> targets = lora_targets(spec, in.lora);
  // The adapters' table as the trainer hands it to the engine.
  std::vector<zero::ParamSpan> adapters;
  std::vector<int64_t> adapter_units(size_t(units), 0);
  int64_t off = 0;
  for (const ParamSpec& s : lora_layout(targets, in.lora.rank, true)) {
    adapters.push_back({s.name, s.unit, off, s.shape.numel(), false, s.weight_decay});
    off += s.shape.numel();
    adapter_units[size_t(s.unit)] += s.shape.numel();
  }
  const double trained = double(off);
  const double padded = double(zero::PartitionLayout(adapters, N, in.sub_group_size).padded_elements());
  const auto [base, base_units] = param_table(spec);
  const uint64_t staging_buffer = uint64_t(in.pin_buffer_bytes + 4095) / 4096 * 4096;
  const double buffers = double(in.pin_buffers) * double(staging_buffer);
  const double scratch = op_scratch_bytes(in.device, op_shapes(spec, in.micro_batch, in.seq_len, in.threads));
  std::vector<PlanRow> rows;
  for (int stage = 0; stage <= 3; ++stage)
    for (const std::string o : {"none", "cpu", "nvme", "cpu+param", "cpu+param-nvme"})
      for (bool ckpt : {false, true}) {
        if ((stage == 0 && o != "none") || (o.find("+param") != std::string::npos && stage != 3)) continue;
        PlanRow r;
        r.stage = stage, r.offload = o, r.checkpointing = ckpt;
        zero::StateFormat states;
        states.moments = in.states.moments;
        if (stage > 0 && in.mixed) states.master = in.states.master;
        zero::ZeroOptions zo;
        zo.stage = stage, zo.reduce_bucket_size = in.reduce_bucket, zo.allgather_bucket_size = in.allgather_bucket;
        zo.offload_optimizer = o != "none", zo.nvme = o == "nvme";
        zo.sub_group_size = in.sub_group_size, zo.param_persistence_threshold = in.persistence_threshold;
        zo.prefetch_depth = in.prefetch_depth, zo.states = states;
        zo.speculative_step = zero::speculative_step_for(in.speculative_step, zo.nvme, in.grad_clip);
        const double host_free = in.host_bytes > 0 ? std::max(0.0, in.host_bytes - (o != "none" ? buffers : 0)) : -1;
        const zero::EnginePlan a = zero::plan_engine({adapters, adapter_units, N, dt, zo, staging_buffer, 4096,
                                                      host_free < 0 ? UINT64_MAX : uint64_t(host_free)});
        r.traffic = zero::step_traffic(a, in.grad_accum);
        double dev = double(a.device_bytes()), host = double(a.host_bytes()), nvme = double(a.nvme_bytes());
        double frozen = double(spec.num_params()) * elem;  // whole on every rank at stages 0-2
        if (stage == 3) {
          zero::ZeroOptions zf = zo;
          zf.offload_optimizer = false, zf.offload_param = o.find("+param") != std::string::npos;
          zf.nvme = o == "cpu+param-nvme";
          const double left = host_free < 0 ? -1 : std::max(0.0, host_free - double(a.host_bytes()));
          zero::EnginePlanInput fi{base, base_units,     N,    dt,
                                   zf,   staging_buffer, 4096, left < 0 ? UINT64_MAX : uint64_t(left)};
          fi.frozen = true, fi.embedding_in_backward = spec.head_is_embedding();
          const zero::EnginePlan f = zero::plan_engine(fi);
          r.traffic = r.traffic + zero::step_traffic(f, in.grad_accum);
          dev += double(f.device_bytes()), host += double(f.host_bytes()), nvme += double(f.nvme_bytes());
          frozen = double(f.shard_elements()) * elem;
        }
        ModelStorage storage{stage < 3, false, stage < 3 && !in.mixed, ckpt, nullptr};
        storage.frozen = true;
        dev += double(model_device_bytes(spec, in.micro_batch, in.seq_len, dt, storage));
        dev += double(LoraAdapters::device_bytes(targets, in.lora.rank, int64_t(in.micro_batch) * in.seq_len, dt,
                                                 {stage < 3, stage == 0 || !in.mixed, false}));
        r.activations =
            double(model_device_bytes(spec, in.micro_batch, in.seq_len, dt, ModelStorage{false, false, false, ckpt}));
        r.scratch = scratch;
        dev += scratch;
        if (o != "none") host += buffers;
        const ModelStates ms = plan_model_states(stage, trained, padded, N, in.mixed, states);
        r.params = frozen + ms.params, r.grads = ms.grads, r.optim = ms.optim;
        r.device = dev, r.host = host, r.nvme = nvme;
        r.fits = (in.device_bytes <= 0 || dev <= in.device_bytes) && (in.host_bytes <= 0 || host <= in.host_bytes) &&
                 (in.nvme_bytes <= 0 || nvme <= in.nvme_bytes);
        // Step time: a frozen weight's matmul runs forward and the input's gradient, not its
        // own: 4Ψ FLOP per token (6Ψ with recomputation) against full training's 6Ψ (8Ψ).
        const double full = spec.training_flops_per_token(in.seq_len, ckpt);
        const double compute = full * (ckpt ? 6.0 / 8.0 : 4.0 / 6.0) * tokens / in.device_flops;
        // Ring volumes: the adapters' 2Ψ_A, and at stage 3 the frozen shard all-gathered in
        // forward and backward.
        const double comm =
            N > 1 ? ((stage == 3 ? 2 * frozen * (N - 1) : 0) + 2 * trained * elem * (N - 1) / N) / in.net_bw : 0;
        const double link = double(r.traffic.d2h + r.traffic.h2d) / in.link_bw;
        const double disk = double(r.traffic.n2h + r.traffic.h2n) / in.nvme_bw;
        const double state_bytes = double(states.master_bytes() + 2 * states.moment_bytes());
        const double adam = o != "none" ? padded / N * (2 * state_bytes + 2 * elem) / in.host_bw : 0;
        r.step_s = std::max({compute, comm, link, adam, disk});
        rows.push_back(r);
      }
  return rows;
}

}  // namespace strata
