#include "bench/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>

#include "core/error.h"

extern char** environ;

namespace strata::bench {

std::string shell_line(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) {
    const bool plain =
        !a.empty() && a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=+:,") ==
                          std::string::npos;
    out += (out.empty() ? "" : " ") + (plain ? a : "'" + a + "'");
  }
  return out;
}

ProcessResult run_logged(const std::vector<std::string>& argv, const std::string& log_path, double timeout_s) {
  STRATA_CHECK(!argv.empty(), "run_logged: empty command", "internal error");
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, args[0], &fa, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  STRATA_CHECK(rc == 0, "cannot start '" + argv[0] + "': " + std::strerror(rc),
               "check the program exists (mpirun: apt-get install openmpi-bin)");
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  ProcessResult r;
  int status = 0;
  for (;;) {
    const pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    STRATA_CHECK(w == 0 || errno == EINTR, std::string("waitpid: ") + std::strerror(errno), "internal error");
    if (timeout_s > 0 && elapsed() > timeout_s && !r.timed_out) {
      r.timed_out = true;
      kill(-pid, SIGKILL);  // the whole group: mpirun and its ranks
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  r.seconds = elapsed();
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  return r;
}

std::string run_captured(const std::string& shell_cmd) {
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen(shell_cmd.c_str(), "r"), pclose);
  if (!p) return {};
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), p.get())) out.append(buf.data(), n);
  return out;
}

}  // namespace strata::bench
