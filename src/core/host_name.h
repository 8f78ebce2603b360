// This machine's host name (gethostname), as ranks, locks and messages name it.
#pragma once
#include <string>

namespace strata {

std::string host_name();

}  // namespace strata
