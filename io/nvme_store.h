// The NVMe tier's store: one swap file per rank under --nvme-path, read and written with
// io_uring and O_DIRECT.
//
// NvmeFile is the file: opened with O_DIRECT after a check that the file system takes it,
// its block size (the alignment of every buffer, offset and length) queried from the device,
// preallocated with fallocate after a free-space check that names the needed and available
// bytes, and — optionally — an xxHash64 checksum per block, verified on every read.
// NvmeQueue is one io_uring on a file, used by one thread: requests of at most
// `request_bytes`, up to `queue_depth` in flight, submitted in batches; every completion is
// classified (liburing's io_uring-cp.c): a negative result is an error naming the file, the
// offset and errno's text; -EAGAIN is resubmitted; a short transfer continues with the
// remainder; zero bytes read past the end means a torn (short) file.
#pragma once
#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

struct io_uring;

namespace strata::io {

struct NvmeOptions {
  std::string dir;                         // --nvme-path
  int queue_depth = 32;                    // requests in flight per queue
  size_t request_bytes = size_t(1) << 20;  // bytes per request
  bool checksum = false;                   // xxHash64 per block, verified on read
};

// Test seam: sees every completion before it is classified and may change its result
// (inject -EIO, -ENOSPC, -EAGAIN or a short count).
class IoFaults {
 public:
  virtual ~IoFaults() = default;
  virtual int on_complete(bool write, uint64_t offset, size_t len, int res) = 0;
};

class NvmeFile {
 public:
  // Creates (or reuses) dir/name with `bytes` of space, failing with a clear message when the
  // directory is missing, the file system refuses O_DIRECT or has too little free space.
  NvmeFile(const NvmeOptions& opts, const std::string& name, uint64_t bytes);
  ~NvmeFile();
  NvmeFile(const NvmeFile&) = delete;
  NvmeFile& operator=(const NvmeFile&) = delete;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  size_t block_size() const { return block_; }
  uint64_t capacity() const { return bytes_; }
  const NvmeOptions& options() const { return opts_; }
  // Rounds up to the block size.
  uint64_t align(uint64_t n) const { return (n + block_ - 1) / block_ * block_; }

  // Checksums (when enabled): record before a write, verify after a read.
  void record_checksums(uint64_t offset, const void* buf, size_t len);
  void verify_checksums(uint64_t offset, const void* buf, size_t len) const;

  void set_faults(IoFaults* f) { faults_ = f; }
  IoFaults* faults() const { return faults_; }

  std::atomic<uint64_t> bytes_read{0}, bytes_written{0};

 private:
  NvmeOptions opts_;
  std::string path_;
  int fd_ = -1;
  size_t block_ = 4096;
  uint64_t bytes_ = 0;
  std::vector<uint64_t> sums_;  // per block: 0 = never written, else hash | 1
  mutable std::mutex sums_mu_;
  IoFaults* faults_ = nullptr;
};

class NvmeQueue {
 public:
  // queue_depth 0: the file's --aio-queue-depth (the bench measures others).
  explicit NvmeQueue(NvmeFile& file, int queue_depth = 0);
  ~NvmeQueue();
  NvmeQueue(const NvmeQueue&) = delete;
  NvmeQueue& operator=(const NvmeQueue&) = delete;

  struct Op {
    bool write;
    uint64_t offset;  // block-aligned
    void* buf;        // block-aligned host memory
    size_t len;       // a multiple of the block size
  };
  // Registers buffers for fixed I/O (IORING_OP_READ_FIXED/WRITE_FIXED); ops inside them use it.
  void register_buffers(std::span<const iovec> buffers);
  // Queues ops as a batch and submits what fits; returns the batch's ticket.
  uint64_t start(std::span<const Op> ops);
  // Blocks until batch `ticket` (and every earlier one) has completed; rethrows its error.
  void wait(uint64_t ticket);
  void run(std::span<const Op> ops) { wait(start(ops)); }
  uint64_t last_ticket() const { return next_ticket_ - 1; }

 private:
  struct Request {
    uint64_t ticket, offset;
    char* buf;
    size_t len, done;
    bool write;
    int fixed;  // registered buffer index, or -1
  };
  void pump();  // submits queued requests up to the queue depth
  void reap_one();
  void check(const Op& op) const;

  NvmeFile& file_;
  std::unique_ptr<io_uring> ring_;
  std::vector<Request> slots_;  // in flight, indexed by user_data
  std::vector<int> free_slots_;
  std::vector<Request> queued_;  // waiting for a slot (FIFO)
  size_t queued_head_ = 0;
  std::vector<iovec> fixed_;
  uint64_t next_ticket_ = 1;
  std::vector<uint64_t> outstanding_;  // per ticket (ring of recent tickets): requests left
  uint64_t completed_upto_ = 0;
  std::string error_;  // first failure, reported by wait()
  uint64_t error_ticket_ = 0;
};

}  // namespace strata::io
