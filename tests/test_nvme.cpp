// The io_uring NVMe store: data round-trips at every request size and queue depth; every
// completion is classified (errors name the file and offset, -EAGAIN is resubmitted, a
// short transfer continues); checksums catch corruption; a torn file, a misaligned request,
// a missing or O_DIRECT-less directory and a full disk are clear errors.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "io/nvme_store.h"

namespace strata::io {
namespace {

namespace fs = std::filesystem;

std::string scratch_dir() {
  const fs::path d = fs::temp_directory_path() / ("strata_nvme_" + std::to_string(getpid()));
  fs::create_directories(d);
  return d.string();
}

struct Aligned {
  explicit Aligned(size_t n) : bytes(n) { p = static_cast<char*>(std::aligned_alloc(4096, n)); }
  ~Aligned() { std::free(p); }
  char* p;
  size_t bytes;
};

void fill(char* p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; i += 4) {
    const uint32_t v = uint32_t(i) * 2654435761u + seed;
    std::memcpy(p + i, &v, 4);
  }
}

std::string message_of(auto&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(NvmeStore, RoundTripsAtEveryRequestSizeAndQueueDepth) {
  for (size_t req : {size_t(4096), size_t(64) << 10, size_t(1) << 20}) {
    for (int qd : {1, 4, 32}) {
      NvmeFile f({scratch_dir(), qd, req, true}, "rt.swap", size_t(8) << 20);
      NvmeQueue q(f);
      Aligned a(size_t(3) << 20), b(size_t(3) << 20);
      fill(a.p, a.bytes, uint32_t(req + qd));
      std::memset(b.p, 0, b.bytes);
      const iovec reg{a.p, a.bytes};
      q.register_buffers({&reg, 1});
      const uint64_t t = q.start(std::vector<NvmeQueue::Op>{{true, 4096, a.p, a.bytes}});
      q.wait(t);
      q.run(std::vector<NvmeQueue::Op>{{false, 4096, b.p, b.bytes}});
      EXPECT_EQ(std::memcmp(a.p, b.p, a.bytes), 0) << "request " << req << ", depth " << qd;
      EXPECT_GE(f.bytes_written.load(), a.bytes);
    }
  }
}

// A failing, a retried and a short completion, injected through the seam.
class Faults final : public IoFaults {
 public:
  int mode = 0;  // 0 none, 1 EIO on reads, 2 EAGAIN once, 3 short reads, 4 ENOSPC on writes
  int calls = 0;
  int on_complete(bool write, uint64_t, size_t len, int res) override {
    ++calls;
    if (mode == 1 && !write) return -EIO;
    if (mode == 2 && calls == 1) return -EAGAIN;
    if (mode == 3 && !write && res > 4096 && len > 4096) return 4096;  // the kernel did part: continue
    if (mode == 4 && write) return -ENOSPC;
    return res;
  }
};

TEST(NvmeStore, CompletionsAreClassified) {
  NvmeFile f({scratch_dir(), 8, size_t(64) << 10, false}, "faults.swap", size_t(4) << 20);
  Faults faults;
  f.set_faults(&faults);
  NvmeQueue q(f);
  Aligned a(size_t(1) << 20), b(size_t(1) << 20);
  fill(a.p, a.bytes, 7);
  q.run(std::vector<NvmeQueue::Op>{{true, 0, a.p, a.bytes}});
  faults.mode = 1;
  const std::string eio = message_of([&] { q.run(std::vector<NvmeQueue::Op>{{false, 0, b.p, b.bytes}}); });
  EXPECT_NE(eio.find("faults.swap"), std::string::npos) << eio;
  EXPECT_NE(eio.find("offset"), std::string::npos) << eio;
  EXPECT_NE(eio.find("Input/output error"), std::string::npos) << eio;
  faults.mode = 2, faults.calls = 0;
  std::memset(b.p, 0, b.bytes);
  q.run(std::vector<NvmeQueue::Op>{{false, 0, b.p, b.bytes}});
  EXPECT_EQ(std::memcmp(a.p, b.p, a.bytes), 0) << "-EAGAIN must be resubmitted";
  faults.mode = 3;
  std::memset(b.p, 0, b.bytes);
  q.run(std::vector<NvmeQueue::Op>{{false, 0, b.p, b.bytes}});
  EXPECT_EQ(std::memcmp(a.p, b.p, a.bytes), 0) << "a short read must continue with the remainder";
  faults.mode = 4;
  const std::string nospc = message_of([&] { q.run(std::vector<NvmeQueue::Op>{{true, 0, a.p, a.bytes}}); });
  EXPECT_NE(nospc.find("No space left"), std::string::npos) << nospc;
  faults.mode = 0;
  q.run(std::vector<NvmeQueue::Op>{{false, 0, b.p, b.bytes}});  // the queue still works after errors
}

TEST(NvmeStore, ChecksumsCatchCorruptionAndTornFilesAreErrors) {
  const std::string dir = scratch_dir();
  NvmeFile f({dir, 4, size_t(1) << 20, true}, "sum.swap", size_t(2) << 20);
  NvmeQueue q(f);
  Aligned a(size_t(1) << 20), b(size_t(1) << 20);
  fill(a.p, a.bytes, 11);
  q.run(std::vector<NvmeQueue::Op>{{true, 0, a.p, a.bytes}});
  {  // flip one byte behind the store's back
    const int fd = open(f.path().c_str(), O_WRONLY);
    const char x = 0x5a;
    ASSERT_EQ(pwrite(fd, &x, 1, 12345), 1);
    fsync(fd);
    close(fd);
  }
  const std::string bad = message_of([&] { q.run(std::vector<NvmeQueue::Op>{{false, 0, b.p, b.bytes}}); });
  EXPECT_NE(bad.find("checksum mismatch"), std::string::npos) << bad;
  EXPECT_NE(bad.find("offset 12288"), std::string::npos) << "names the block: " << bad;
  ASSERT_EQ(truncate(f.path().c_str(), 4096), 0);  // torn: shorter than it was made
  const std::string torn = message_of([&] { q.run(std::vector<NvmeQueue::Op>{{false, 0, b.p, b.bytes}}); });
  EXPECT_NE(torn.find("end of the file"), std::string::npos) << torn;
}

TEST(NvmeStore, BadPathsAndRequestsAreClearErrors) {
  EXPECT_NE(message_of([] { NvmeFile({"", 4, 1 << 20, false}, "x", 4096); }).find("--nvme-path"), std::string::npos);
  EXPECT_NE(message_of([] {
              NvmeFile({"/nonexistent/dir", 4, 1 << 20, false}, "x", 4096);
            }).find("not a directory"),
            std::string::npos);
  // A file where a directory should be. (A file system without O_DIRECT gets its own
  // message naming O_DIRECT; tmpfs takes O_DIRECT since Linux 6.6, so it is not tested here.)
  const std::string file = scratch_dir() + "/plain";
  std::fclose(std::fopen(file.c_str(), "w"));
  EXPECT_NE(message_of([&] {
              NvmeFile({file, 4, 1 << 20, false}, "x", 4096);
            }).find("not a directory"),
            std::string::npos);
  NvmeFile f({scratch_dir(), 4, size_t(1) << 20, false}, "align.swap", size_t(1) << 20);
  NvmeQueue q(f);
  Aligned a(8192);
  EXPECT_NE(message_of([&] {
              q.run(std::vector<NvmeQueue::Op>{{true, 100, a.p, 4096}});
            }).find("not aligned"),
            std::string::npos);
  EXPECT_NE(message_of([&] {
              q.run(std::vector<NvmeQueue::Op>{{true, 0, a.p + 512, 4096}});
            }).find("not aligned"),
            std::string::npos);
  EXPECT_NE(message_of([&] {
              q.run(std::vector<NvmeQueue::Op>{{true, 1 << 20, a.p, 4096}});
            }).find("past the end"),
            std::string::npos);
}

// A drive that is too small: the free-space check names what is needed and what is there,
// before anything is written. A small ext4 loop file system when this runs as root; the file
// size limit (RLIMIT_FSIZE → EFBIG) everywhere.
TEST(NvmeStore, FullDiskIsRefusedBeforeWriting) {
  struct rlimit old {};
  getrlimit(RLIMIT_FSIZE, &old);
  struct rlimit small = old;
  small.rlim_cur = 1 << 20;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  const std::string big = message_of([] { NvmeFile({scratch_dir(), 4, 1 << 20, false}, "fsize.swap", 8 << 20); });
  setrlimit(RLIMIT_FSIZE, &old);
  EXPECT_NE(big.find("ulimit -f"), std::string::npos) << big;
  if (geteuid() != 0) GTEST_SKIP() << "the loop-mounted small file system needs root";
  const fs::path img = fs::path(scratch_dir()) / "small.img", mnt = fs::path(scratch_dir()) / "small";
  fs::create_directories(mnt);
  const std::string mk = "truncate -s 32M " + img.string() + " && mkfs.ext4 -q -F " + img.string() +
                         " && mount -o loop " + img.string() + " " + mnt.string() + " 2>/dev/null";
  if (std::system(mk.c_str()) != 0) GTEST_SKIP() << "cannot loop-mount a small file system here";
  const std::string m = message_of([&] { NvmeFile({mnt.string(), 4, 1 << 20, false}, "full.swap", 64 << 20); });
  std::system(("umount " + mnt.string()).c_str());
  EXPECT_NE(m.find("no space"), std::string::npos) << m;
  EXPECT_NE(m.find("needs 64.00 MiB"), std::string::npos) << m;
  EXPECT_NE(m.find("has "), std::string::npos) << m;
}

}  // namespace
}  // namespace strata::io
