#include "comm/mpi_comm.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <thread>

#include "core/error.h"
#include "core/host_name.h"

namespace strata {

namespace {

MPI_Datatype mpi_type(CommType t) {
  switch (t) {
    case CommType::f32:
      return MPI_FLOAT;
    case CommType::f64:
      return MPI_DOUBLE;
    case CommType::i32:
      return MPI_INT32_T;
    case CommType::i64:
      return MPI_INT64_T;
    case CommType::u8:
      return MPI_UINT8_T;
    case CommType::u16:
      return MPI_UINT16_T;
  }
  return MPI_BYTE;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return MPI_SUM;
    case ReduceOp::max:
      return MPI_MAX;
    case ReduceOp::min:
      return MPI_MIN;
  }
  return MPI_SUM;
}

std::string mpi_error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, buf, &len);
  return std::string(buf, size_t(len));
}

#define STRATA_MPI_CHECK(call, what)                                                                   \
  do {                                                                                                 \
    int strata_rc_ = (call);                                                                           \
    if (strata_rc_ != MPI_SUCCESS) [[unlikely]]                                                        \
      ::strata::throw_error(std::string(what) + ": " #call " failed: " + mpi_error_string(strata_rc_), \
                            "check that every rank is alive and the network between hosts works");     \
  } while (0)

// MPI is initialised once per process and finalized at exit (after all communicators).
struct MpiRuntime {
  bool we_initialised = false;
  MpiRuntime() {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
      int provided = 0;
      STRATA_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI start-up");
      STRATA_CHECK(
          provided >= MPI_THREAD_SERIALIZED,
          "the MPI library provides thread level " + std::to_string(provided) + ", below MPI_THREAD_SERIALIZED",
          "use an MPI built with thread support (Debian's OpenMPI is)");
      we_initialised = true;
    }
  }
  ~MpiRuntime() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (we_initialised && !finalized) MPI_Finalize();
  }
};

MpiRuntime& runtime() {
  static MpiRuntime rt;
  return rt;
}

}  // namespace

bool MpiComm::launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_STEP_NUM_TASKS"})
    if (std::getenv(v)) return true;
  return false;
}

MpiComm::MpiComm(MpiCommOptions opts) : opts_(opts) {
  runtime();
  STRATA_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "creating the communicator");
  // Errors come back as return codes (checked on every call), never abort inside MPI.
  STRATA_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "creating the communicator");
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  host_ = host_name();
  // Every rank's host name, for messages about other ranks and for the topology.
  constexpr int kName = 64;
  std::vector<char> all(size_t(size_) * kName, 0);
  char mine[kName] = {};
  std::strncpy(mine, host_.c_str(), kName - 1);
  STRATA_MPI_CHECK(MPI_Allgather(mine, kName, MPI_CHAR, all.data(), kName, MPI_CHAR, comm_), "exchanging host names");
  for (int r = 0; r < size_; ++r) hosts_.emplace_back(&all[size_t(r) * kName]);
  // Nodes are hosts; STRATA_RANKS_PER_NODE overrides them (a test simulating nodes on one
  // host, or containers that all carry the same host name).
  if (const char* rpn = std::getenv("STRATA_RANKS_PER_NODE"); rpn && *rpn) {
    char* end = nullptr;
    const long k = std::strtol(rpn, &end, 10);
    STRATA_CHECK(*end == 0 && k > 0, std::string("STRATA_RANKS_PER_NODE=") + rpn, "give a positive whole number");
    set_topology(Topology::blocks(size_, int(k)));
  } else {
    set_topology(Topology::from_hosts(hosts_));
  }
  // Half the collective timeout: a silent neighbour is a stronger sign than a slow collective,
  // so the watch names the lost rank before a collective times out without knowing which.
  if (opts_.watch_peers)
    watch_ = std::make_unique<PeerWatch>(comm_, rank_, size_, hosts_, std::max(2.0, opts_.timeout_s / 2));
}

MpiComm::MpiComm(MPI_Comm comm, MpiCommOptions opts, std::vector<std::string> hosts, Topology topo)
    : opts_(opts), comm_(comm), hosts_(std::move(hosts)) {
  opts_.watch_peers = false;
  STRATA_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "creating a sub-communicator");
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  host_ = hosts_[size_t(rank_)];
  set_topology(std::move(topo));
}

std::unique_ptr<Communicator> MpiComm::split(int color) {
  STRATA_CHECK(color >= 0, "split with color " + std::to_string(color), "colors are 0 or more");
  // Which ranks share this color, so the group knows its members' hosts and nodes.
  std::vector<int32_t> colors(size_t(size_), 0);
  int32_t mine = color;
  all_gather(std::span<const int32_t>(&mine, 1), std::span<int32_t>(colors));
  std::vector<std::string> hosts, nodes;  // the group's nodes, named by the parent's node index
  for (int r = 0; r < size_; ++r)
    if (colors[size_t(r)] == color)
      hosts.push_back(hosts_[size_t(r)]), nodes.push_back(std::to_string(topology().node(r)));
  MPI_Comm sub = MPI_COMM_NULL;
  STRATA_MPI_CHECK(MPI_Comm_split(comm_, color, rank_, &sub), "splitting the communicator into groups");
  auto out = std::unique_ptr<MpiComm>(new MpiComm(sub, opts_, std::move(hosts), Topology::from_hosts(nodes)));
  out->count_into(*this);
  return out;
}

MpiComm::~MpiComm() {
  // Unwinding from an error: the other ranks must not wait for this one in a collective.
  if (watch_ && std::uncaught_exceptions() > 0) watch_->report_failure();
  watch_.reset();
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

std::string MpiComm::describe(const Call& call) const {
  static const char* names[] = {"?", "all_reduce", "reduce_scatter", "all_gather", "broadcast", "barrier"};
  return std::string(names[int(call.kind)]) + " of " + std::to_string(call.count) + " " +
         std::string(comm_type_name(call.type)) + " (call #" + std::to_string(seq_) + ") on rank " +
         std::to_string(rank_) + " of " + std::to_string(size_) + " (host " + host_ + ")" + call.phase;
}

void MpiComm::wait(MPI_Request& req, const Call& call) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + std::chrono::duration<double>(opts_.timeout_s);
  int done = 0;
  for (int spins = 0;; ++spins) {
    STRATA_MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE), describe(call));
    if (done) return;
    if (clock::now() > deadline) {
      throw_error(describe(call) + " did not complete within " + std::to_string(int(opts_.timeout_s)) + " s",
                  "another rank has died, hung, or is in a different collective; check the other ranks' logs "
                  "(the timeout is --comm-timeout)");
    }
    // Spin briefly for latency, then back off so a waiting rank does not steal a core.
    if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(spins > 100000 ? 1000 : 50));
  }
}

void MpiComm::agree(const Call& call, int64_t extra) {
  ++seq_;
  STRATA_CHECK(call.count <= size_t(INT32_MAX), describe(call) + ": count exceeds MPI's int limit",
               "split the buffer (lower --sub-group-size)");
  if (!opts_.validate || size_ == 1) return;
  // max and -min of the signature in one reduction: they differ iff some rank disagrees.
  int64_t sig[4] = {int64_t(call.kind), int64_t(call.type), int64_t(call.count), extra};
  int64_t both[8], out[8];
  for (int i = 0; i < 4; ++i) both[i] = sig[i], both[4 + i] = -sig[i];
  const Call check{call.kind, call.type, call.count, " (agreement check)"};
  MPI_Request req;
  STRATA_MPI_CHECK(MPI_Iallreduce(both, out, 8, MPI_INT64_T, MPI_MAX, comm_, &req), describe(check));
  wait(req, check);
  for (int i = 0; i < 4; ++i)
    if (out[i] != -out[4 + i])
      throw_error(
          "collective mismatch: " + describe(call) + ", but another rank called a different collective or count",
          "every rank must issue the same collectives in the same order with the same sizes; "
          "this is a bug in the caller");
}

void MpiComm::do_all_reduce(void* data, CommType t, size_t count, ReduceOp op) {
  const Call call{Kind::all_reduce, t, count};
  agree(call, int64_t(op));
  MPI_Request req;
  STRATA_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data, int(count), mpi_type(t), mpi_op(op), comm_, &req),
                   describe(call));
  wait(req, call);
  count_sent(2.0 * double(size_ - 1) / double(size_) * double(count), t);
}

void MpiComm::do_reduce_scatter(const void* in, void* out, CommType t, size_t count_out) {
  const Call call{Kind::reduce_scatter, t, count_out};
  agree(call, 0);
  MPI_Request req;
  STRATA_MPI_CHECK(MPI_Ireduce_scatter_block(in, out, int(count_out), mpi_type(t), MPI_SUM, comm_, &req),
                   describe(call));
  wait(req, call);
  count_sent(double(size_ - 1) * double(count_out), t);
}

void MpiComm::do_all_gather(const void* in, void* out, CommType t, size_t count_in) {
  const Call call{Kind::all_gather, t, count_in};
  agree(call, 0);
  MPI_Request req;
  STRATA_MPI_CHECK(MPI_Iallgather(in, int(count_in), mpi_type(t), out, int(count_in), mpi_type(t), comm_, &req),
                   describe(call));
  wait(req, call);
  count_sent(double(size_ - 1) * double(count_in), t);
}

void MpiComm::do_broadcast(void* data, CommType t, size_t count, int root) {
  STRATA_CHECK(root >= 0 && root < size_, "broadcast from rank " + std::to_string(root),
               "the root must be a valid rank");
  const Call call{Kind::broadcast, t, count};
  agree(call, root);
  MPI_Request req;
  STRATA_MPI_CHECK(MPI_Ibcast(data, int(count), mpi_type(t), root, comm_, &req), describe(call));
  wait(req, call);
  count_sent(size_ > 1 ? double(count) : 0.0, t);
}

void MpiComm::barrier() {
  const Call call{Kind::barrier, CommType::u8, 0};
  agree(call, 0);
  MPI_Request req;
  STRATA_MPI_CHECK(MPI_Ibarrier(comm_, &req), describe(call));
  wait(req, call);
}

}  // namespace strata
