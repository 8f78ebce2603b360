// One run owns an --out directory: OUT/.lock, held with flock(2) by rank 0 for the whole job.
// A second run there is refused naming the owner's PID and host; a lock left by a process
// that died is recognised (the kernel dropped its flock) and taken over with a note. flock
// also works across hosts on NFS (Linux emulates it with byte-range locks).
#pragma once
#include <string>

namespace strata {

class Communicator;

// Who holds (or last held) a lock: "PID 1234 on host node3".
struct LockOwner {
  long pid = 0;
  std::string host;
  std::string describe() const;
  bool is_this_process() const;
  // False only when the owner is provably gone: on this host with no such process, or on
  // another host while this process holds the run lock.
  bool may_be_alive(bool holding_run_lock) const;
};
// This process as an owner tag "host-pid" (for file names) and back.
std::string owner_tag();
bool parse_owner_tag(const std::string& tag, LockOwner* owner);

class RunLock {
 public:
  // Collective over comm (null: one rank): every rank throws if the directory is taken.
  RunLock(const std::string& out, Communicator* comm);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;
  // Set when a dead run's lock was taken over: who it was.
  const std::string& taken_over() const { return taken_over_; }

 private:
  std::string path_, taken_over_;
  int fd_ = -1;
};

}  // namespace strata
