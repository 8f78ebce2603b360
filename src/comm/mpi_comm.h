// Collectives over OpenMPI for host buffers (and MPI bootstrap for NCCL).
//
// Never a silent hang: every collective is a non-blocking MPI call polled against a
// deadline (`timeout_s`); one that does not complete in time is an Error naming the
// collective, its size, the call number, this rank and host. With `validate` on, a cheap
// agreement check before each collective turns a mismatch (different collective or count
// on different ranks) into an Error on every rank instead of undefined behaviour.
#pragma once
#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/peer_watch.h"

namespace strata {

struct MpiCommOptions {
  double timeout_s = 300;
  bool validate = true;
  // A PeerWatch beside MPI: a lost rank ends every survivor at once, naming it (the CLI
  // turns it on; its heartbeat timeout is timeout_s).
  bool watch_peers = false;
};

class MpiComm final : public Communicator {
 public:
  // Initialises MPI (thread level SERIALIZED or better) on first use; finalized at exit.
  explicit MpiComm(MpiCommOptions opts = {});
  ~MpiComm() override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string host() const override { return host_; }
  const std::vector<std::string>& hosts() const { return hosts_; }
  void barrier() override;
  std::unique_ptr<Communicator> split(int color) override;
  // True when launched under mpirun/srun (so a single-rank run needs no MPI at all).
  static bool launched_by_mpi();

 protected:
  void do_all_reduce(void* data, CommType t, size_t count, ReduceOp op) override;
  void do_reduce_scatter(const void* in, void* out, CommType t, size_t count_out) override;
  void do_all_gather(const void* in, void* out, CommType t, size_t count_in) override;
  void do_broadcast(void* data, CommType t, size_t count, int root) override;

 private:
  enum class Kind : int64_t { all_reduce = 1, reduce_scatter, all_gather, broadcast, barrier };
  // One collective call; its description is built only when something goes wrong, so the
  // step's collectives allocate nothing.
  struct Call {
    Kind kind;
    CommType type;
    size_t count;
    const char* phase = "";
  };
  // A sub-communicator from MPI_Comm_split (no peer watch: the parent's covers its ranks).
  MpiComm(MPI_Comm comm, MpiCommOptions opts, std::vector<std::string> hosts, Topology topo);
  void agree(const Call& call, int64_t extra);
  void wait(MPI_Request& req, const Call& call);
  std::string describe(const Call& call) const;

  MpiCommOptions opts_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  std::string host_;
  std::vector<std::string> hosts_;  // every rank's host
  uint64_t seq_ = 0;
  std::unique_ptr<PeerWatch> watch_;
};

}  // namespace strata
