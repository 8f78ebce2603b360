#include "core/host_name.h"

#include <unistd.h>

namespace strata {

std::string host_name() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

}  // namespace strata
