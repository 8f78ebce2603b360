#include "train/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <span>
#include <thread>

#include "comm/communicator.h"
#include "core/error.h"
#include "core/host_name.h"

namespace strata {

std::string LockOwner::describe() const { return "PID " + std::to_string(pid) + " on host " + host; }

bool LockOwner::is_this_process() const { return pid == long(::getpid()) && host == host_name(); }

bool LockOwner::may_be_alive(bool holding_run_lock) const {
  if (is_this_process()) return true;
  if (host == host_name()) return !(::kill(pid_t(pid), 0) != 0 && errno == ESRCH);
  return !holding_run_lock;
}

std::string owner_tag() { return host_name() + "-" + std::to_string(::getpid()); }

bool parse_owner_tag(const std::string& tag, LockOwner* owner) {
  const size_t dash = tag.rfind('-');
  if (dash == std::string::npos || dash == 0 || dash + 1 == tag.size()) return false;
  if (tag.find_first_not_of("0123456789", dash + 1) != std::string::npos || tag.size() - dash > 12) return false;
  owner->host = tag.substr(0, dash);
  owner->pid = std::stol(tag.substr(dash + 1));
  return true;
}

RunLock::RunLock(const std::string& out, Communicator* comm) : path_(out + "/.lock") {
  const int rank = comm ? comm->rank() : 0, world = comm ? comm->size() : 1;
  std::string err, hint;
  if (rank == 0) {
    std::error_code ec;
    std::filesystem::create_directories(out, ec);
    fd_ = ec ? -1 : ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      err = "cannot create the run lock '" + path_ + "': " + (ec ? ec.message() : std::strerror(errno));
      hint = "check --out (it must be a writable directory)";
    } else {
      char buf[512] = {};
      const ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
      LockOwner prev;
      const bool had_owner = n > 0 && parse_owner_tag(std::string(buf, size_t(n)), &prev);
      if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
        const int e = errno;
        ::close(fd_), fd_ = -1;
        err = e == EWOULDBLOCK ? "--out " + out + " is in use by another run (" +
                                     (had_owner ? prev.describe() : std::string("owner unknown")) + ")"
                               : "cannot lock '" + path_ + "': " + std::strerror(e);
        hint = e == EWOULDBLOCK ? "wait for that run to end or stop it, or give another --out"
                                : "the file system may not support locks; give --out on a local or NFS file system";
      } else {
        if (had_owner) taken_over_ = prev.describe();  // a clean exit clears the tag: its owner died
        const std::string tag = owner_tag();
        if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, tag.data(), tag.size(), 0) != ssize_t(tag.size())) {
          err = "cannot write the run lock '" + path_ + "': " + std::strerror(errno);
          hint = "free space on --out's disk";
        }
      }
    }
  }
  int64_t bad = err.empty() ? 0 : 1;
  if (comm && world > 1) comm->all_reduce(std::span<int64_t>(&bad, 1), ReduceOp::max);
  if (!err.empty() || bad) {
    if (fd_ >= 0) ::close(fd_), fd_ = -1;
    if (!err.empty()) throw_error(err, hint);
    // Rank 0 knows why and reports it. Give it time to: were this rank to exit first, rank
    // 0's peer watch could end it (exit 70, "lost rank N") before its message is printed.
    // Rank 0's exit ends this rank through its own watch; the error below is the fallback.
    std::this_thread::sleep_for(std::chrono::seconds(3));
  }
  STRATA_CHECK(bad == 0, "rank 0 could not take the run lock of --out " + out + " (its message says why)",
               "wait for the other run to end, or give another --out");
}

RunLock::~RunLock() {
  if (fd_ < 0) return;
  // Released cleanly: an empty file names no owner; the flock goes with the descriptor.
  [[maybe_unused]] const int rc = ::ftruncate(fd_, 0);
  ::close(fd_);
}

}  // namespace strata
