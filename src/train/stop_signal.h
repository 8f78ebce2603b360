// A graceful stop on SIGINT/SIGTERM: the first signal only raises a flag, which the trainer
// agrees across ranks inside the step's own reduction, so every rank finishes the same step,
// saves a checkpoint (with --save-every) and returns; a second signal ends the process at once.
#pragma once

namespace strata {

// Blocks SIGINT/SIGTERM in the calling thread and starts the one thread that takes them:
// call it before any other thread exists (the CLI does, before MPI starts). In-process
// callers need not.
void install_stop_handlers();
// The signal that asked for a stop (0: none).
int stop_signal();
// Asks for a stop as if `sig` had arrived (tests), or clears the request with 0.
void request_stop(int sig);

}  // namespace strata
