#include "train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "comm/communicator.h"
#include "core/error.h"
#include "train/run_lock.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

void fsync_path(const fs::path& p, bool dir) {
  const int fd = ::open(p.c_str(), (dir ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  STRATA_CHECK(fd >= 0, "cannot open '" + p.string() + "' to sync it: " + std::strerror(errno), "check --out");
  const int rc = ::fsync(fd);
  const int e = errno;
  ::close(fd);
  STRATA_CHECK(rc == 0, "fsync of '" + p.string() + "' failed: " + std::strerror(e), "the disk may be full or failing");
}

void write_file_durably(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    STRATA_CHECK(f, "cannot create '" + tmp.string() + "': " + std::strerror(errno), "check --out");
    const bool ok =
        std::fwrite(text.data(), 1, text.size(), f) == text.size() && std::fflush(f) == 0 && ::fsync(fileno(f)) == 0;
    const int e = errno;
    std::fclose(f);
    STRATA_CHECK(ok, "writing '" + tmp.string() + "' failed: " + std::strerror(e), "free space on --out's disk");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  STRATA_CHECK(!ec, "cannot rename '" + tmp.string() + "': " + ec.message(), "check --out");
}

std::string rank_file_name(int rank, int world) {
  char b[64];
  std::snprintf(b, sizeof b, "rank-%05d-of-%05d.safetensors", rank, world);
  return b;
}

bool parse_step_dir(const std::string& name, int64_t* step) {
  if (name.size() != 13 || name.compare(0, 5, "step-") != 0) return false;
  int64_t v = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    v = v * 10 + (name[i] - '0');
  }
  *step = v;
  return true;
}

std::vector<std::pair<int64_t, fs::path>> complete_checkpoints(const fs::path& root) {
  std::vector<std::pair<int64_t, fs::path>> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    int64_t step = 0;
    if (e.is_directory() && parse_step_dir(e.path().filename().string(), &step) &&
        fs::exists(e.path() / "manifest.json"))
      out.emplace_back(step, e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::string checkpoint_dir_name(int64_t step) {
  char b[32];
  std::snprintf(b, sizeof b, "step-%08lld", (long long)step);
  return b;
}

std::string newest_checkpoint(const std::string& out) {
  auto all = complete_checkpoints(fs::path(out) / "checkpoints");
  return all.empty() ? std::string() : all.back().second.string();
}

std::string describe_newest_checkpoint(const std::string& out) {
  const std::string dir = newest_checkpoint(out);
  return dir.empty() ? "there is no complete checkpoint in " + out + "/checkpoints yet"
                     : "the last complete checkpoint is " + dir;
}

void save_checkpoint(const std::string& out, CheckpointManifest manifest, Communicator* comm, int keep,
                     uint64_t rank_bytes, const std::function<SavedRankFile(const std::string&)>& write_rank_file) {
  const int rank = comm ? comm->rank() : 0, world = comm ? comm->size() : 1;
  const fs::path root = fs::path(out) / "checkpoints";
  const fs::path final_dir = root / checkpoint_dir_name(manifest.step);
  // The temporary directory names its creator, so no run removes another live run's.
  std::array<uint8_t, 128> name{};  // rank 0's "host-pid", to every rank
  if (rank == 0) {
    const std::string mine = owner_tag();
    std::copy_n(mine.begin(), std::min(mine.size(), name.size() - 1), name.begin());
  }
  if (comm && world > 1) comm->broadcast(std::span<uint8_t>(name), 0);
  const std::string tag(reinterpret_cast<const char*>(name.data()));
  const fs::path tmp = root / ("." + checkpoint_dir_name(manifest.step) + "." + tag + ".tmp");
  // Every failure is agreed: a rank that failed says so, and all ranks throw alike, after
  // rank 0 removed what this save had written (no partial files are left).
  auto agree = [&](bool ok, const std::string& what) {
    int64_t bad = ok ? 0 : 1;
    if (comm && world > 1) comm->all_reduce(std::span<int64_t>(&bad, 1), ReduceOp::max);
    if (bad == 0) return;
    std::error_code ec;
    if (rank == 0) fs::remove_all(tmp, ec);
    throw_error("checkpoint of step " + std::to_string(manifest.step) + " failed: " + what,
                describe_newest_checkpoint(out) + "; free space or fix --out, then --resume");
  };
  // The whole checkpoint must fit before a byte is written: every rank's file and the manifest.
  int64_t need = int64_t(rank_bytes);
  if (comm && world > 1) comm->all_reduce(std::span<int64_t>(&need, 1), ReduceOp::sum);
  need += 4096 + 256 * world;  // the manifest
  std::string err;
  if (rank == 0) {
    try {
      std::error_code ec;
      fs::create_directories(root, ec);
      STRATA_CHECK(!ec, "cannot create '" + root.string() + "': " + ec.message(), "check --out");
      // Leftovers of interrupted saves, removed only when their creator is gone (this rank
      // holds the run lock, so another host's run is over too).
      for (const auto& e : fs::directory_iterator(root)) {
        const std::string name = e.path().filename().string();
        if (!name.starts_with(".step-") || !name.ends_with(".tmp")) continue;
        const size_t dot = name.find('.', 1);
        LockOwner owner;
        const bool tagged = dot != std::string::npos && name.size() > dot + 5 &&
                            parse_owner_tag(name.substr(dot + 1, name.size() - dot - 5), &owner);
        if (!tagged || owner.is_this_process() || !owner.may_be_alive(true)) fs::remove_all(e.path());
      }
      const fs::space_info space = fs::space(root, ec);
      const bool skip_check = std::getenv("STRATA_TEST_SKIP_SPACE_CHECK") != nullptr;  // test seam: a failed write
      STRATA_CHECK(ec || skip_check || space.available >= uint64_t(need),
                   "it needs " + format_bytes(double(need)) + ", has " + format_bytes(double(space.available)) +
                       " free at " + root.string(),
                   "");
      fs::create_directories(tmp);
    } catch (const Error& e) {
      err = e.what_failed();
    } catch (const std::exception& e) {
      err = e.what();
    }
  }
  agree(err.empty(), err.empty() ? "rank 0 could not prepare the directory" : err);
  SavedRankFile mine;
  try {
    mine = write_rank_file((tmp / rank_file_name(rank, world)).string());
  } catch (const Error& e) {
    err = e.what_failed();
  } catch (const std::exception& e) {
    err = e.what();
  }
  agree(err.empty(), err.empty() ? "another rank could not write its partition" : err);
  // Each rank's checksum and size, to rank 0's manifest.
  const int64_t pair[2] = {int64_t(mine.xxh64), int64_t(mine.bytes)};
  std::vector<int64_t> all(size_t(2 * world));
  if (comm && world > 1)
    comm->all_gather(std::span<const int64_t>(pair, 2), std::span<int64_t>(all));
  else
    all[0] = pair[0], all[1] = pair[1];
  if (rank == 0) {
    try {
      manifest.files.clear();
      for (int r = 0; r < world; ++r)
        manifest.files.push_back(
            {rank_file_name(r, world), uint64_t(all[size_t(2 * r + 1)]), uint64_t(all[size_t(2 * r)])});
      if (const char* k = std::getenv("STRATA_TEST_KILL_DURING_SAVE"); k && std::atoll(k) == manifest.step)
        ::raise(SIGKILL);  // test seam: die with every partition written but no manifest
      write_file_durably(tmp / "manifest.json", manifest.to_json().dump(1) + "\n");
      fsync_path(tmp, true);
      if (fs::exists(final_dir)) fs::remove_all(final_dir);  // a checkpoint of the same step (rerun)
      fs::rename(tmp, final_dir);
      fsync_path(root, true);
    } catch (const Error& e) {
      err = e.what_failed();
    } catch (const std::exception& e) {
      err = e.what();
    }
  }
  agree(err.empty(), err.empty() ? "rank 0 could not complete the manifest" : err);
  if (rank == 0) {
    // Prune: the oldest beyond `keep`, manifest first so a half-deleted one is never complete.
    // The new checkpoint is complete by now; a failure here costs only disk space.
    try {
      auto done = complete_checkpoints(root);
      for (size_t i = 0; keep > 0 && i + size_t(keep) < done.size(); ++i) {
        fs::remove(done[i].second / "manifest.json");
        fsync_path(done[i].second, true);
        fs::remove_all(done[i].second);
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "strata: warning: pruning old checkpoints failed: %s\n", e.what());
    }
  }
}

// One state (master, m or v): the pieces of every rank file, sorted by flat position.
class CheckpointReader::Source final : public FlatSource {
 public:
  struct Piece {
    int64_t begin, count;
    const io::SafetensorsFile* file;
    const io::SafeTensor* tensor;
  };
  std::vector<Piece> pieces;
  std::string what;
  void read(int64_t flat_begin, int64_t count, float* out) const override {
    const int64_t end = flat_begin + count;
    auto it = std::upper_bound(pieces.begin(), pieces.end(), flat_begin,
                               [](int64_t v, const Piece& p) { return v < p.begin + p.count; });
    int64_t at = flat_begin;
    for (; at < end && it != pieces.end() && it->begin <= at; ++it) {
      const int64_t hi = std::min(end, it->begin + it->count);
      it->file->read_f32(*it->tensor, at - it->begin, std::span<float>(out + (at - flat_begin), size_t(hi - at)));
      at = hi;
    }
    STRATA_CHECK(
        at == end,
        what + " has no values for parameter elements [" + std::to_string(at) + ", " + std::to_string(end) + ")",
        "the checkpoint is incomplete or was written for a different model");
  }
};

CheckpointReader::CheckpointReader(const std::string& dir, Communicator* comm) : dir_(dir) {
  const fs::path mpath = fs::path(dir) / "manifest.json";
  std::ifstream f(mpath);
  STRATA_CHECK(f.good(), "cannot read '" + mpath.string() + "'", "is this a complete checkpoint directory?");
  std::stringstream ss;
  ss << f.rdbuf();
  manifest_ = CheckpointManifest::parse(ss.str(), mpath.string());
  const int rank = comm ? comm->rank() : 0, world = comm ? comm->size() : 1;
  // Sizes first (cheap, everywhere), then the checksums, each rank a share of the files.
  int64_t bad = -1;
  std::string err;
  for (size_t i = 0; i < manifest_.files.size(); ++i) {
    const CheckpointFile& cf = manifest_.files[i];
    const fs::path p = fs::path(dir) / cf.name;
    std::error_code ec;
    const uint64_t size = fs::file_size(p, ec);
    if (ec || size != cf.bytes) {
      bad = int64_t(i);
      err = "'" + p.string() + "' has " + (ec ? "no size (" + ec.message() + ")" : std::to_string(size) + " bytes") +
            ", the manifest says " + std::to_string(cf.bytes) + " (truncated?)";
      break;
    }
    if (int(i % size_t(world)) == rank) {
      const uint64_t h = io::file_xxh64(p.string());
      if (h != cf.xxh64) {
        bad = int64_t(i);
        err = "'" + p.string() + "' has checksum " + io::hex64(h) + ", the manifest says " + io::hex64(cf.xxh64) +
              " (corrupted)";
        break;
      }
    }
  }
  int64_t worst = bad;
  if (comm && world > 1) comm->all_reduce(std::span<int64_t>(&worst, 1), ReduceOp::max);
  STRATA_CHECK(worst < 0,
               err.empty() ? "checkpoint '" + dir + "': file " + manifest_.files[size_t(worst)].name +
                                 " failed its size or checksum check on another rank"
                           : "checkpoint '" + dir + "': " + err,
               "resume from an older checkpoint: delete this directory (or its manifest.json)");
  for (int k = 0; k < 3; ++k) {
    sources_.push_back(std::make_unique<Source>());
    sources_.back()->what = "checkpoint '" + dir + "' (" + (k == 0 ? "master" : k == 1 ? "m" : "v") + ")";
  }
  for (const CheckpointFile& cf : manifest_.files) {
    files_.push_back(std::make_unique<io::SafetensorsFile>((fs::path(dir) / cf.name).string()));
    for (const io::SafeTensor& t : files_.back()->header().tensors) {
      const size_t dot = t.name.find('.');
      const std::string kind = t.name.substr(0, dot);
      const int k = kind == "master" ? 0 : kind == "m" ? 1 : kind == "v" ? 2 : -1;
      int64_t begin = -1;
      if (dot != std::string::npos && dot + 1 < t.name.size() &&
          t.name.find_first_not_of("0123456789", dot + 1) == std::string::npos && t.name.size() - dot <= 16)
        begin = std::stoll(t.name.substr(dot + 1));
      STRATA_CHECK(k >= 0 && begin >= 0 && t.readable && t.shape.size() == 1,
                   "checkpoint file '" + files_.back()->path() + "' holds an unexpected tensor '" + t.name + "'",
                   "the checkpoint is corrupted or not Strata's");
      sources_[size_t(k)]->pieces.push_back({begin, t.shape[0], files_.back().get(), &t});
    }
  }
  for (auto& s : sources_) {
    std::sort(s->pieces.begin(), s->pieces.end(),
              [](const Source::Piece& a, const Source::Piece& b) { return a.begin < b.begin; });
    for (size_t i = 1; i < s->pieces.size(); ++i)
      STRATA_CHECK(s->pieces[i].begin >= s->pieces[i - 1].begin + s->pieces[i - 1].count,
                   s->what + ": two files hold parameter element " + std::to_string(s->pieces[i].begin),
                   "the checkpoint is corrupted");
    int64_t total = 0;
    for (const auto& p : s->pieces) total += p.count;
    STRATA_CHECK(total == manifest_.num_params,
                 s->what + " holds " + std::to_string(total) + " values for " + std::to_string(manifest_.num_params) +
                     " parameters",
                 "the checkpoint is incomplete or corrupted");
  }
}

CheckpointReader::~CheckpointReader() = default;

const FlatSource& CheckpointReader::source(int kind) const { return *sources_[size_t(kind)]; }

}  // namespace strata
