#include "train/stop_signal.h"

#include <pthread.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <thread>

namespace strata {

namespace {

std::atomic<int> g_stop{0};

}  // namespace

// The signals are blocked in this thread, and so in every thread created after it (MPI's,
// OpenMP's, the streams'), and taken by one thread with sigwait. No handler ever interrupts
// a kernel, a JIT-compiled GEMM or a library call: a stop is only a flag the step reads.
void install_stop_handlers() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set] {
    for (;;) {
      int sig = 0;
      if (sigwait(&set, &sig) != 0) continue;
      int none = 0;
      if (g_stop.compare_exchange_strong(none, sig)) {
        std::fprintf(stderr, "\nstrata: %s: finishing this step, then stopping (a second signal stops at once)\n",
                     sig == SIGINT ? "SIGINT" : "SIGTERM");
        continue;
      }
      // The second signal: its default action, now (this thread unblocks it and raises it).
      std::signal(sig, SIG_DFL);
      pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
      ::raise(sig);
    }
  }).detach();
}

int stop_signal() { return g_stop.load(std::memory_order_relaxed); }

void request_stop(int sig) { g_stop.store(sig, std::memory_order_relaxed); }

}  // namespace strata
