// The CPU backend's op scratch (cpu/workspace.h) for a step's shapes, as an upper bound: the
// planner charges it to the device before the run, and the run's grow-only workspace stays
// within it.
#pragma once
#include "backend/op_shapes.h"

namespace strata::cpu {

double op_scratch_bytes(const OpShapes& s);

}  // namespace strata::cpu
