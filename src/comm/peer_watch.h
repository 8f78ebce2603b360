// Fail fast when a rank is lost. Each rank keeps a TCP connection to its ring neighbours
// (r-1 and r+1), outside MPI, and sends a heartbeat byte every second. A neighbour whose
// connection closes (its process died: the kernel closes its sockets) or that stays silent
// for `timeout_s` (its host hung or its link is down) is lost: the rank that sees it tells
// the rest of the ring the other way round, and every survivor prints which rank and host
// was lost and exits with kLostRankExit — no rank waits in a collective for hours. A rank
// that stops with an error says so (report_failure), and the others stop the same way.
//
// Addresses: every rank offers its non-loopback IPv4 addresses (loopback when it has none,
// or STRATA_SOCKET_IFNAME's only), exchanged once through MPI; a neighbour takes the first
// that connects.
#pragma once
#include <mpi.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace strata {

inline constexpr int kLostRankExit = 70;

class PeerWatch {
 public:
  // Collective over `comm` (every rank constructs one). hosts: every rank's host name.
  PeerWatch(MPI_Comm comm, int rank, int size, std::vector<std::string> hosts, double timeout_s);
  ~PeerWatch();  // says goodbye, so a rank that finishes first is not reported lost
  // This rank is stopping with an error: its neighbours stop too, naming it, instead of
  // waiting in a collective for it until --comm-timeout.
  void report_failure();
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

 private:
  struct Link {
    int fd = -1, peer = -1;
    double last_heard = 0;
    bool open = false;
  };
  void run();
  void shut_down(char last_word);
  [[noreturn]] void lost(int rank, const std::string& why, int from_fd);

  int rank_, size_;
  std::vector<std::string> hosts_;
  double timeout_s_;
  Link links_[2];  // 0: to r+1 (this rank connected), 1: from r-1 (it connected)
  int wake_[2] = {-1, -1};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace strata
