#include "io/nvme_store.h"

#include <fcntl.h>
#include <liburing.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace strata::io {

namespace {

std::string errno_text(int e) { return std::string(std::strerror(e)) + " (errno " + std::to_string(e) + ")"; }

// The direct-I/O alignment the file system reports (statx STATX_DIOALIGN, Linux 6.1+), at
// least 4 KiB so buffers also suit devices that report less.
size_t dio_alignment(int fd) {
  size_t align = 4096;
#ifdef STATX_DIOALIGN
  struct statx sx {};
  if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 && (sx.stx_mask & STATX_DIOALIGN))
    align = std::max<size_t>({align, sx.stx_dio_mem_align, sx.stx_dio_offset_align});
#endif
  struct stat st {};
  if (fstat(fd, &st) == 0 && st.st_blksize > 0) align = std::max<size_t>(align, size_t(st.st_blksize));
  return align;
}

}  // namespace

NvmeFile::NvmeFile(const NvmeOptions& opts, const std::string& name, uint64_t bytes) : opts_(opts) {
  namespace fs = std::filesystem;
  STRATA_CHECK(!opts.dir.empty(), "the NVMe tier needs a directory for its swap files",
               "give --nvme-path DIR on a local NVMe (or SSD) file system");
  std::error_code ec;
  STRATA_CHECK(fs::is_directory(opts.dir, ec), "--nvme-path " + opts.dir + " is not a directory",
               "create it (mkdir -p) or point --nvme-path at an existing directory");
  STRATA_CHECK(opts.queue_depth >= 1 && opts.queue_depth <= 4096, "I/O queue depth " + std::to_string(opts.queue_depth),
               "use a queue depth between 1 and 4096");
  path_ = (fs::path(opts.dir) / name).string();
  // Writes past RLIMIT_FSIZE must fail with EFBIG, not kill the process with SIGXFSZ.
  signal(SIGXFSZ, SIG_IGN);
  // O_TRUNC: a stale swap file from a killed run must not leak its contents into m and v.
  fd_ = open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0600);
  if (fd_ < 0) {
    const int e = errno;
    throw_error("--nvme-path " + opts.dir + ": cannot open " + path_ + " for direct I/O: " + errno_text(e),
                e == EINVAL ? "this file system does not support O_DIRECT (tmpfs does not): use a directory on a "
                              "block device's file system (ext4, xfs)"
                            : "check the directory's permissions");
  }
  block_ = dio_alignment(fd_);
  bytes_ = align(std::max<uint64_t>(bytes, 1));
  STRATA_CHECK(opts.request_bytes >= block_ && opts.request_bytes % block_ == 0,
               "I/O request size " + std::to_string(opts.request_bytes) + " bytes",
               "use a multiple of the device's block size (" + std::to_string(block_) + " bytes), e.g. 1MiB");
  // Free space first, so a too-small disk is a message, not a half-written swap file.
  struct stat st {};
  fstat(fd_, &st);
  const uint64_t have_now = uint64_t(st.st_blocks) * 512;
  struct statvfs vfs {};
  if (fstatvfs(fd_, &vfs) == 0) {
    const uint64_t avail = uint64_t(vfs.f_bavail) * uint64_t(vfs.f_frsize);
    const uint64_t need = bytes_ > have_now ? bytes_ - have_now : 0;
    if (need > avail) {
      close(fd_);
      fd_ = -1;
      unlink(path_.c_str());
      throw_error("--nvme-path " + opts.dir + ": no space for " + path_ + ": needs " + format_bytes(double(need)) +
                      ", has " + format_bytes(double(avail)),
                  "free space there, point --nvme-path at a larger drive, or offload less (--offload-ratio, "
                  "--offload-param none)");
    }
  }
  if (fallocate(fd_, 0, 0, off_t(bytes_)) != 0) {
    const int e = errno;
    if (e == EOPNOTSUPP) {
      STRATA_CHECK(ftruncate(fd_, off_t(bytes_)) == 0, "sizing " + path_ + ": " + errno_text(errno),
                   "check the file system and RLIMIT_FSIZE (ulimit -f)");
    } else {
      close(fd_);
      fd_ = -1;
      unlink(path_.c_str());
      throw_error("--nvme-path " + opts.dir + ": preallocating " + format_bytes(double(bytes_)) + " for " + path_ +
                      " failed: " + errno_text(e),
                  e == ENOSPC  ? "free space there or point --nvme-path at a larger drive"
                  : e == EFBIG ? "the file size limit (ulimit -f) is too low: raise it"
                               : "check the file system");
    }
  }
  if (opts.checksum) sums_.assign(size_t(bytes_ / block_), 0);
}

NvmeFile::~NvmeFile() {
  if (fd_ >= 0) {
    close(fd_);
    unlink(path_.c_str());  // swap space, not a checkpoint: it does not outlive the run
  }
}

void NvmeFile::record_checksums(uint64_t offset, const void* buf, size_t len) {
  if (sums_.empty()) return;
  const char* p = static_cast<const char*>(buf);
  std::lock_guard lock(sums_mu_);
  for (size_t b = 0; b < len; b += block_) sums_[size_t((offset + b) / block_)] = XXH3_64bits(p + b, block_) | 1;
}

void NvmeFile::verify_checksums(uint64_t offset, const void* buf, size_t len) const {
  if (sums_.empty()) return;
  const char* p = static_cast<const char*>(buf);
  std::lock_guard lock(sums_mu_);
  for (size_t b = 0; b < len; b += block_) {
    const uint64_t want = sums_[size_t((offset + b) / block_)];
    if (want == 0) continue;  // never written: preallocated zeros
    if ((XXH3_64bits(p + b, block_) | 1) != want)
      throw_error("checksum mismatch in " + path_ + " at offset " + std::to_string(offset + b) + " (block of " +
                      std::to_string(block_) + " bytes)",
                  "the swap file was changed or the drive returned bad data: check the drive (dmesg, smartctl)");
  }
}

NvmeQueue::NvmeQueue(NvmeFile& file, int queue_depth) : file_(file), ring_(std::make_unique<io_uring>()) {
  const int depth = queue_depth > 0 ? queue_depth : file.options().queue_depth;
  const int rc = io_uring_queue_init(unsigned(depth), ring_.get(), 0);
  if (rc < 0) {
    ring_.reset();
    throw_error("io_uring_queue_init(" + std::to_string(depth) + ") failed: " + errno_text(-rc),
                "the kernel may lack io_uring or limit it (kernel.io_uring_disabled); try a smaller queue depth");
  }
  int fd = file.fd();
  const int reg = io_uring_register_files(ring_.get(), &fd, 1);
  STRATA_CHECK(reg == 0, "registering " + file.path() + " with io_uring failed: " + errno_text(-reg),
               "check RLIMIT_NOFILE and the kernel's io_uring support");
  slots_.resize(size_t(depth));
  for (int i = depth - 1; i >= 0; --i) free_slots_.push_back(i);
  queued_.reserve(1024);
  outstanding_.reserve(1024);
}

NvmeQueue::~NvmeQueue() {
  if (!ring_) return;
  try {  // drain what is in flight: the kernel must not write into freed memory
    while (free_slots_.size() < slots_.size()) reap_one();
  } catch (...) {
  }
  io_uring_queue_exit(ring_.get());
}

void NvmeQueue::register_buffers(std::span<const iovec> buffers) {
  fixed_.assign(buffers.begin(), buffers.end());
  const int rc = io_uring_register_buffers(ring_.get(), fixed_.data(), unsigned(fixed_.size()));
  if (rc < 0) {
    fixed_.clear();  // fixed buffers are an optimisation; plain reads and writes still work
  }
}

void NvmeQueue::check(const Op& op) const {
  const size_t b = file_.block_size();
  STRATA_CHECK(op.offset % b == 0 && op.len % b == 0 && reinterpret_cast<uintptr_t>(op.buf) % b == 0,
               std::string(op.write ? "write" : "read") + " of " + std::to_string(op.len) + " bytes at offset " +
                   std::to_string(op.offset) + " of " + file_.path() + " is not aligned to the block size " +
                   std::to_string(b),
               "O_DIRECT needs buffers, offsets and lengths aligned to the device's block size; this is a bug in "
               "the caller");
  STRATA_CHECK(op.offset + op.len <= file_.capacity(),
               std::string(op.write ? "write" : "read") + " past the end of " + file_.path() + " (offset " +
                   std::to_string(op.offset) + " + " + std::to_string(op.len) + " > " +
                   std::to_string(file_.capacity()) + ")",
               "this is a bug in the caller");
}

uint64_t NvmeQueue::start(std::span<const Op> ops) {
  const uint64_t ticket = next_ticket_++;
  size_t count = 0;
  const size_t req = file_.options().request_bytes;
  for (const Op& op : ops) {
    check(op);
    if (op.write) file_.record_checksums(op.offset, op.buf, op.len);
    int fixed = -1;
    for (size_t i = 0; i < fixed_.size(); ++i) {
      const char* base = static_cast<const char*>(fixed_[i].iov_base);
      if (static_cast<char*>(op.buf) >= base && static_cast<char*>(op.buf) + op.len <= base + fixed_[i].iov_len)
        fixed = int(i);
    }
    for (size_t at = 0; at < op.len; at += req, ++count)
      queued_.push_back(
          {ticket, op.offset + at, static_cast<char*>(op.buf) + at, std::min(req, op.len - at), 0, op.write, fixed});
  }
  outstanding_.push_back(count);
  pump();
  return ticket;
}

void NvmeQueue::pump() {
  unsigned added = 0;
  while (queued_head_ < queued_.size() && !free_slots_.empty()) {
    io_uring_sqe* sqe = io_uring_get_sqe(ring_.get());
    if (!sqe) break;
    const int s = free_slots_.back();
    free_slots_.pop_back();
    Request& r = slots_[size_t(s)] = queued_[queued_head_++];
    char* p = r.buf + r.done;
    const unsigned n = unsigned(r.len - r.done);
    const uint64_t off = r.offset + r.done;
    if (r.fixed >= 0) {
      if (r.write)
        io_uring_prep_write_fixed(sqe, 0, p, n, off, r.fixed);
      else
        io_uring_prep_read_fixed(sqe, 0, p, n, off, r.fixed);
    } else if (r.write) {
      io_uring_prep_write(sqe, 0, p, n, off);
    } else {
      io_uring_prep_read(sqe, 0, p, n, off);
    }
    sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data64(sqe, uint64_t(s));
    ++added;
  }
  if (queued_head_ == queued_.size()) queued_.clear(), queued_head_ = 0;
  if (added) {
    const int rc = io_uring_submit(ring_.get());
    STRATA_CHECK(rc >= 0, "io_uring_submit on " + file_.path() + " failed: " + errno_text(-rc),
                 "check the kernel's io_uring support and the drive");
  }
}

void NvmeQueue::reap_one() {
  io_uring_cqe* cqe = nullptr;
  int rc;
  do rc = io_uring_wait_cqe(ring_.get(), &cqe);
  while (rc == -EINTR);
  STRATA_CHECK(rc == 0, "io_uring_wait_cqe on " + file_.path() + " failed: " + errno_text(-rc),
               "check the kernel's io_uring support");
  const int s = int(io_uring_cqe_get_data64(cqe));
  int res = cqe->res;
  io_uring_cqe_seen(ring_.get(), cqe);
  Request& r = slots_[size_t(s)];
  const uint64_t off = r.offset + r.done;
  if (IoFaults* f = file_.faults()) res = f->on_complete(r.write, off, r.len - r.done, res);
  auto fail = [&](const std::string& what, const std::string& hint) {
    if (error_.empty()) error_ = what + " — " + hint, error_ticket_ = r.ticket;
    --outstanding_[size_t(r.ticket - completed_upto_ - 1)];
    free_slots_.push_back(s);
  };
  if (res == -EAGAIN || res == -EINTR) {  // resubmit as is
    queued_.insert(queued_.begin() + std::ptrdiff_t(queued_head_), r);
    free_slots_.push_back(s);
    pump();
    return;
  }
  if (res < 0) {
    fail(std::string(r.write ? "write" : "read") + " of " + std::to_string(r.len - r.done) + " bytes at offset " +
             std::to_string(off) + " of " + file_.path() + " failed: " + errno_text(-res),
         -res == ENOSPC  ? "the drive is full: free space or point --nvme-path at a larger drive"
         : -res == EFBIG ? "the file size limit (ulimit -f) is too low"
                         : "check the drive (dmesg) and --nvme-path");
    return;
  }
  if (res == 0 && r.done < r.len) {
    fail(std::string(r.write ? "write" : "read") + " at offset " + std::to_string(off) + " of " + file_.path() +
             " hit the end of the file",
         "the swap file is shorter than it was made (torn or truncated by something else): restart the run");
    return;
  }
  r.done += size_t(res);
  (r.write ? file_.bytes_written : file_.bytes_read) += uint64_t(res);
  if (r.done < r.len) {  // short transfer: continue with the remainder
    queued_.insert(queued_.begin() + std::ptrdiff_t(queued_head_), r);
    free_slots_.push_back(s);
    pump();
    return;
  }
  if (!r.write) {
    try {
      file_.verify_checksums(r.offset, r.buf, r.len);
    } catch (const Error& e) {
      fail(e.what_failed(), e.hint());
      return;
    }
  }
  --outstanding_[size_t(r.ticket - completed_upto_ - 1)];
  free_slots_.push_back(s);
}

void NvmeQueue::wait(uint64_t ticket) {
  auto done_upto = [&] {  // drops finished tickets from the front
    size_t k = 0;
    while (k < outstanding_.size() && outstanding_[k] == 0) ++k;
    if (k) {
      outstanding_.erase(outstanding_.begin(), outstanding_.begin() + std::ptrdiff_t(k));
      completed_upto_ += k;
    }
  };
  done_upto();
  while (completed_upto_ < ticket) {
    pump();
    reap_one();
    done_upto();
  }
  if (!error_.empty() && error_ticket_ <= ticket) {
    const std::string e = error_;
    error_.clear();
    throw_error(e.substr(0, e.find(" — ")), e.find(" — ") == std::string::npos ? "" : e.substr(e.find(" — ") + 5));
  }
}

}  // namespace strata::io
