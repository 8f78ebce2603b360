// Where activation checkpoints live when they are kept off the device (--offload-activations
// cpu, the paper's P_a+cpu). With --activation-checkpointing a layer keeps only its output
// (the residual stream); backward recomputes the layer from its input. The store lends the
// device memory each checkpoint is written to or read from — a small ring — and moves the
// checkpoints to host RAM and back in the background.
#pragma once

namespace strata {

class ActivationStore {
 public:
  virtual ~ActivationStore() = default;
  // Device memory for layer l's output, free to write (forward).
  virtual void* forward_slot(int layer) = 0;
  // Layer l's output is written: it may leave for the host.
  virtual void forward_done(int layer) = 0;
  // Device memory holding layer l's output (backward, descending layers): fetched if it
  // left, and the layer below is fetched ahead.
  virtual const void* backward_slot(int layer) = 0;
};

}  // namespace strata
