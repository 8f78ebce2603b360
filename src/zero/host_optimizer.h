// The host side of an offloaded optimizer (--offload-optimizer cpu or nvme): this
// rank's master, m and v for shard offsets [begin, end), with the gradient accumulator
// (in the run's gradient dtype, always in host RAM), updated chunk by chunk by the CPU Adam
// on the host stream. The states are f32, or (StateFormat) m and v and/or the master in
// bf16: the interface below stays f32 (widened on reads, rounded to nearest on writes, which
// gives back a widened bf16 exactly), so checkpoints (which store each state in its dtype),
// export and resharding see f32 states. Beside a bf16 master, the groups without weight
// decay (norm gains, biases) keep an f32 master in RAM, whatever the tier
// (StateFormat::master_of); the bf16 master holds their rounding to nearest.
//
// Where the states live: host RAM, or an NVMe swap file, in regions master | m | v
// (and, with parameters offloaded too and an f32 master, the 16-bit parameters; a bf16
// master is those parameters). On NVMe each update swaps
// its chunk through a ring of three host buffers: while Adam runs on chunk c, the read of
// chunk c+1 and the write of chunk c-1 are in flight.
//
// Speculative steps (the default): the update of a chunk runs as soon as its gradients are
// complete, during backward, before the global norm is known. It reads the committed state
// (copy `cur`) and writes the other copy, so the committed state stays intact: commit()
// flips the copies; when clipping or an overflow says the speculation was wrong, the step
// recomputes from the committed copy (clipping) or keeps it (overflow). In RAM this costs a
// second copy of master, m and v and no extra memory traffic (the kernel reads one copy and
// writes the other in the same pass); on NVMe a second region. Without speculation there is
// one copy in RAM, updated in place after the norm is known; on NVMe there are always two, so
// that a failed write never leaves a partial step behind.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "io/nvme_store.h"
#include "tier/tier_manager.h"
#include "zero/adamw.h"
#include "zero/zero_options.h"

namespace strata::zero {

struct HostChunk {
  int bucket;      // the reduce bucket it belongs to
  int64_t lo, hi;  // shard offsets
};

// What a HostOptimizer of `elements` shard offsets allocates in host RAM, and its swap
// file's size: one function for the constructor and for EnginePlan (strata plan).
struct HostOptimizerSizes {
  int copies = 1;                   // of master, m, v: two when speculating, and always on NVMe
  uint64_t grads = 0;               // accumulated gradients (compute dtype)
  uint64_t states = 0;              // master, m, v in RAM, every copy
  uint64_t compute = 0;             // the 16-bit parameters kept in RAM (stage-3 parameter offload)
  uint64_t swap = 0, bounce = 0;    // NVMe: the ring of three chunk slots; the bounce buffer
  uint64_t region[3] = {0, 0, 0};   // NVMe: bytes of the master's region, of m's (= v's), of the parameters'
  bool keep = false;                // the 16-bit parameters are kept apart from the master
  uint64_t nvme_bytes = 0;          // the swap file
  uint64_t param_cache = 0;         // NVMe parameters: the top of the shard kept in RAM through a step (plan_engine)
  int64_t f32_master_elements = 0;  // parameters without weight decay beside a bf16 master
  // Their f32 masters, every copy, always in RAM.
  uint64_t f32_masters() const { return uint64_t(copies) * uint64_t(f32_master_elements) * 4; }
  uint64_t host_bytes() const { return grads + states + compute + swap + bounce + param_cache + f32_masters(); }
};
// keep_compute: the 16-bit parameters live on the host too (only with a 16-bit compute
// dtype, and apart from the master only when it is f32); nvme_block: the swap file's block
// size (unused without nvme); format: the states' dtypes; f32_master_elements: how many of
// the elements keep an f32 master beside a bf16 one (StateFormat::master_of).
HostOptimizerSizes host_optimizer_sizes(int64_t elements, DType compute_dtype, bool keep_compute, bool speculative,
                                        bool nvme, int64_t chunk_elements, uint64_t nvme_block,
                                        const StateFormat& format = {}, int64_t f32_master_elements = 0);

class HostOptimizer {
 public:
  // groups: AdamW groups in shard offsets (the owned pieces, with weight decay), of which
  // the parts in [begin, end) are this optimizer's. keep_compute: the 16-bit parameters are
  // kept here too (stage-3 parameter offload). nvme: where the states live (null: RAM);
  // chunk_elements bounds a chunk (the NVMe swap buffers' size). f32_master_room: room for the
  // f32 masters of groups without weight decay when the master is bf16 (the plan's count,
  // the most of any rank; at least this optimizer's).
  HostOptimizer(tier::TierManager& tm, int64_t begin, int64_t end, std::span<const AdamW::Group> groups,
                AdamWConfig config, bool speculative, DType compute_dtype, bool keep_compute,
                const io::NvmeOptions* nvme = nullptr, int rank = 0, int64_t chunk_elements = 0,
                const StateFormat& format = {}, int64_t f32_master_room = 0);
  ~HostOptimizer();

  int64_t begin() const { return begin_; }
  int64_t end() const { return end_; }
  bool speculative() const { return speculative_; }
  bool on_nvme() const { return file_ != nullptr; }
  size_t bytes() const;  // host RAM held
  uint64_t nvme_bytes() const { return file_ ? file_->capacity() : 0; }
  const io::NvmeFile* nvme_file() const { return file_.get(); }
  void set_faults(io::IoFaults* f) {
    if (file_) file_->set_faults(f);
  }

  // The committed master of [lo, hi) (shard offsets): written at start-up, read back for
  // export and for mirrors. With NVMe, lo and hi are multiples of the alignment.
  void write_master(int64_t lo, int64_t hi, const float* src) { write_state(0, lo, hi, src); }
  void read_master(int64_t lo, int64_t hi, float* dst) { read_committed(0, lo, hi, dst); }
  // The same for any committed state: kind 0 master, 1 m, 2 v (checkpoints). With NVMe, lo
  // must be a multiple of the alignment (hi may be anything up to end()).
  void write_state(int kind, int64_t lo, int64_t hi, const float* src);
  void read_committed(int kind, int64_t lo, int64_t hi, float* dst);
  int64_t alignment() const;  // elements: what lo must be a multiple of (1 in RAM)
  const StateFormat& format() const { return fmt_; }
  // The committed parameters of [lo, hi) in the compute dtype (f32 runs: the master).
  void read_compute(int64_t lo, int64_t hi, void* dst);
  // After the master is written: derives the kept 16-bit parameters from it.
  void finish_init();

  // grads[lo, hi) (+)= g (rounded to the gradient dtype, as on the device); returns Σ g²
  // of the accumulated chunk (the norm's host part).
  double accumulate(const HostChunk& c, const float* g, bool first);
  // AdamW on the chunk with the accumulated gradients: speculative → writes the other copy,
  // else in place. The updated parameters go to `out` (compute dtype, chunk-relative) when
  // given, and to the kept parameters. Chunks must come in ascending index order (the NVMe
  // prefetch reads the next). Returns true on a non-finite gradient.
  bool update(const HostChunk& c, const HostChunk* next, float lr, float grad_scale, int64_t t, void* out);
  // Writes the committed parameters of the chunk in the compute dtype to out (and restores
  // kept RAM parameters): undoes a speculative copy-out after an overflow.
  void restore(const HostChunk& c, void* out);
  // Waits for every write this thread issued (before the step commits).
  void flush();
  // The speculative copy becomes the committed one.
  void commit();

 private:
  struct Slot {  // an NVMe swap buffer: one chunk's master, m, v (and parameters)
    char *master = nullptr, *m = nullptr, *v = nullptr, *params = nullptr;
    int64_t lo = -1, hi = -1;
    uint64_t read_ticket = 0, write_ticket = 0;
  };
  io::NvmeQueue& queue();                     // this thread's ring on the swap file
  uint64_t region(int kind, int copy) const;  // byte offset of master/m/v/params (kind 0-3)
  DType dtype_of(int kind) const { return kind == 0 ? fmt_.master : kind < 3 ? fmt_.moments : compute_dtype_; }
  size_t size_of(int kind) const { return dtype_size(dtype_of(kind)); }
  // Converts n committed master values to the compute dtype (a copy when they are the same).
  void master_to_compute(void* dst, const void* master, int64_t n) const;
  void read_state(Slot& s, int copy, int64_t lo, int64_t hi, bool with_state);
  int slot_for(int64_t lo);
  // The pointers of one state copy at a chunk's first element, in their dtypes, and that
  // copy's f32 masters (all of them: indexed by f32_at_).
  struct States {
    void *master, *m, *v;
    float* f32_master;
  };
  float* f32_masters(int copy) { return f32_master_[copy].as<float>(); }
  // The committed f32 masters within shard offsets [lo, hi): set from values[i - lo], or
  // written over them (write_state and read_committed of the master).
  void store_f32_masters(int64_t lo, int64_t hi, const float* values);
  void load_f32_masters(int64_t lo, int64_t hi, float* values) const;
  // Calls f(k, a, b) for each group k with an f32 master and its overlap [a, b) with [lo, hi).
  template <typename F>
  void each_f32_master(int64_t lo, int64_t hi, F&& f) const;
  bool adam(States out_state, States in_state, int64_t lo, int64_t hi, float lr, float grad_scale, int64_t t,
            void* out);

  AdamWConfig cfg_;
  StateFormat fmt_;
  int64_t begin_, end_;
  bool speculative_;
  DType compute_dtype_;
  std::vector<AdamW::Group> groups_;                  // clipped to [begin, end), offsets relative to begin
  Buffer master_[2], m_[2], v_[2], grads_, compute_;  // RAM states
  // With a bf16 master, the groups without weight decay keep an f32 master here (in
  // RAM, whatever the tier: a few per mille of the elements); f32_at_[k] is group k's first
  // element in it (-1: none). The bf16 master holds its rounding to nearest, the compute copy.
  std::vector<int64_t> f32_at_;
  Buffer f32_master_[2];
  int cur_ = 0;
  bool two_copies_ = false;
  // NVMe
  std::unique_ptr<io::NvmeFile> file_;
  HostOptimizerSizes sizes_;
  Buffer swap_, bounce_;
  Slot slots_[3];
  int next_slot_ = 0;
  std::mutex queues_mu_;
  std::vector<std::pair<std::thread::id, std::unique_ptr<io::NvmeQueue>>> queues_;
};

}  // namespace strata::zero
