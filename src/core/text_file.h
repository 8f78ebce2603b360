// Small text files written whole (summaries, reports): to a temporary beside the target,
// then renamed, so a reader never sees half a file and a full disk loses nothing old.
#pragma once
#include <string>

namespace strata {

void write_text_file(const std::string& path, const std::string& text);
std::string read_text_file(const std::string& path);

}  // namespace strata
