#include "comm/peer_watch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace strata {

namespace {

constexpr int kMaxAddrs = 4;
constexpr char kBeat = 'h', kBye = 'b', kLost = 'L', kFailed = 'F';

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// This rank's IPv4 addresses for its neighbours, in network order (0: unused slot).
std::vector<uint32_t> local_addresses() {
  std::vector<uint32_t> out, loop;
  const char* only = std::getenv("STRATA_SOCKET_IFNAME");
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) == 0) {
    for (ifaddrs* a = list; a; a = a->ifa_next) {
      if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET || !(a->ifa_flags & IFF_UP)) continue;
      if (only && *only && std::strcmp(a->ifa_name, only) != 0) continue;
      const uint32_t ip = reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr;
      ((a->ifa_flags & IFF_LOOPBACK) ? loop : out).push_back(ip);
    }
    freeifaddrs(list);
  }
  if (out.empty()) out = loop.empty() ? std::vector<uint32_t>{htonl(INADDR_LOOPBACK)} : loop;
  out.resize(kMaxAddrs, 0);
  return out;
}

// Connects to one of the addresses within `seconds`; -1 if none answers.
int connect_any(const uint32_t* addrs, uint16_t port, double seconds) {
  const double deadline = now_s() + seconds;
  while (now_s() < deadline) {
    for (int i = 0; i < kMaxAddrs && addrs[i]; ++i) {
      const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) continue;
      sockaddr_in sa{};
      sa.sin_family = AF_INET, sa.sin_port = port, sa.sin_addr.s_addr = addrs[i];
      fcntl(fd, F_SETFL, O_NONBLOCK);
      int rc = connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
      if (rc != 0 && errno == EINPROGRESS) {
        pollfd p{fd, POLLOUT, 0};
        int err = 0;
        socklen_t len = sizeof err;
        rc = poll(&p, 1, 500) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0 ? 0 : -1;
      }
      if (rc == 0) return fd;
      close(fd);
    }
    usleep(100000);
  }
  return -1;
}

}  // namespace

PeerWatch::PeerWatch(MPI_Comm comm, int rank, int size, std::vector<std::string> hosts, double timeout_s)
    : rank_(rank), size_(size), hosts_(std::move(hosts)), timeout_s_(timeout_s) {
  if (size_ < 2) return;
  const int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  STRATA_CHECK(lfd >= 0, std::string("peer watch: socket: ") + std::strerror(errno), "check the network setup");
  sockaddr_in sa{};
  sa.sin_family = AF_INET, sa.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof sa;
  STRATA_CHECK(bind(lfd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0 && listen(lfd, 4) == 0 &&
                   getsockname(lfd, reinterpret_cast<sockaddr*>(&sa), &len) == 0,
               std::string("peer watch: listening socket: ") + std::strerror(errno), "check the network setup");
  // Every rank's addresses and port, through MPI (which is up: this is its bootstrap).
  std::vector<uint32_t> mine = local_addresses();
  mine.push_back(sa.sin_port);
  std::vector<uint32_t> all(size_t(size_) * (kMaxAddrs + 1));
  STRATA_CHECK(MPI_Allgather(mine.data(), kMaxAddrs + 1, MPI_UINT32_T, all.data(), kMaxAddrs + 1, MPI_UINT32_T, comm) ==
                   MPI_SUCCESS,
               "peer watch: exchanging addresses", "check the MPI setup");
  const int next = (rank_ + 1) % size_, prev = (rank_ + size_ - 1) % size_;
  // Even ranks connect first, then accept; odd ranks the other way: no ring-wide deadlock.
  auto do_connect = [&] {
    const uint32_t* a = &all[size_t(next) * (kMaxAddrs + 1)];
    links_[0] = {connect_any(a, uint16_t(a[kMaxAddrs]), 60), next, now_s(), true};
    STRATA_CHECK(links_[0].fd >= 0,
                 "peer watch: rank " + std::to_string(rank_) + " cannot reach rank " + std::to_string(next) +
                     " (host " + hosts_[size_t(next)] + ")",
                 "the ranks' hosts must reach each other over TCP; STRATA_SOCKET_IFNAME picks the interface");
  };
  auto do_accept = [&] {
    pollfd p{lfd, POLLIN, 0};
    STRATA_CHECK(poll(&p, 1, 60000) == 1, "peer watch: rank " + std::to_string(prev) + " never connected",
                 "the ranks' hosts must reach each other over TCP; STRATA_SOCKET_IFNAME picks the interface");
    links_[1] = {accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC), prev, now_s(), true};
    STRATA_CHECK(links_[1].fd >= 0, std::string("peer watch: accept: ") + std::strerror(errno), "check the network");
  };
  if (rank_ % 2 == 0)
    do_connect(), do_accept();
  else
    do_accept(), do_connect();
  close(lfd);
  for (Link& l : links_) {
    const int one = 1;
    setsockopt(l.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(l.fd, F_SETFL, O_NONBLOCK);
  }
  STRATA_CHECK(pipe2(wake_, O_CLOEXEC) == 0, "peer watch: pipe", "check the process's file limits");
  thread_ = std::thread([this] { run(); });
}

PeerWatch::~PeerWatch() { shut_down(kBye); }

void PeerWatch::report_failure() { shut_down(kFailed); }

// Stops the watch thread and leaves the ring with a last word to both neighbours.
void PeerWatch::shut_down(char last_word) {
  if (!thread_.joinable()) return;
  stop_ = true;
  const char c = 0;
  (void)!write(wake_[1], &c, 1);
  thread_.join();
  for (Link& l : links_) {
    if (l.open) (void)!send(l.fd, &last_word, 1, MSG_NOSIGNAL);
    close(l.fd);
    l.open = false, l.fd = -1;
  }
  close(wake_[0]), close(wake_[1]);
}

void PeerWatch::lost(int rank, const std::string& why, int from_fd) {
  // Pass it on the other way round the ring (not back to where it came from), then stop.
  char msg[5] = {kLost};
  const int32_t r = rank;
  std::memcpy(msg + 1, &r, 4);
  for (Link& l : links_)
    if (l.open && l.fd != from_fd && l.peer != rank) (void)!send(l.fd, msg, sizeof msg, MSG_NOSIGNAL);
  std::fprintf(stderr,
               "strata: rank %d (host %s) lost rank %d (host %s): %s; stopping (exit %d) — resume with --resume "
               "from the last complete checkpoint\n",
               rank_, hosts_[size_t(rank_)].c_str(), rank, hosts_[size_t(rank)].c_str(), why.c_str(), kLostRankExit);
  std::fflush(stderr);
  _exit(kLostRankExit);
}

void PeerWatch::run() {
  double next_beat = 0;
  char buf[64];
  while (!stop_) {
    const double t = now_s();
    if (t >= next_beat) {
      for (Link& l : links_)
        if (l.open) (void)!send(l.fd, &kBeat, 1, MSG_NOSIGNAL);
      next_beat = t + 1.0;
    }
    pollfd p[3] = {{links_[0].fd, POLLIN, 0}, {links_[1].fd, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    for (int i = 0; i < 2; ++i)
      if (!links_[i].open) p[i].fd = -1;
    poll(p, 3, 200);
    if (stop_) return;
    for (int i = 0; i < 2; ++i) {
      Link& l = links_[i];
      if (!l.open) continue;
      if (p[i].revents & (POLLIN | POLLHUP | POLLERR)) {
        const ssize_t n = recv(l.fd, buf, sizeof buf, 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
          lost(l.peer, "its connection closed (the process died)", l.fd);
        for (ssize_t k = 0; k < n; ++k) {
          if (buf[k] == kBye) {
            l.open = false;  // finished normally
          } else if (buf[k] == kFailed) {
            lost(l.peer, "it stopped with an error (see its message)", l.fd);
          } else if (buf[k] == kLost && k + 4 < n) {
            int32_t r;
            std::memcpy(&r, buf + k + 1, 4);
            if (r >= 0 && r < size_) lost(r, "reported by rank " + std::to_string(l.peer), l.fd);
          }
        }
        l.last_heard = now_s();
      }
      if (l.open && now_s() - l.last_heard > timeout_s_)
        lost(l.peer,
             "no heartbeat for " + std::to_string(int(timeout_s_)) +
                 " s (host hung or link down; half of --comm-timeout)",
             l.fd);
    }
  }
}

}  // namespace strata
