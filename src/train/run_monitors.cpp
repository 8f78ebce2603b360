#include "train/run_monitors.h"

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace strata {

RunMonitors::RunMonitors(const std::string& tensorboard_dir, const std::string& csv_dir) : csv_dir_(csv_dir) {
  if (!tensorboard_dir.empty()) tensorboard_ = std::make_unique<io::TfEventWriter>(tensorboard_dir);
  if (!csv_dir_.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(csv_dir_, ec);
    STRATA_CHECK(!ec, "cannot create the CSV monitor's directory '" + csv_dir_ + "': " + ec.message(),
                 "check --csv-dir");
  }
}

void RunMonitors::write(const nlohmann::json& record, int64_t samples) {
  const auto number = [&](const char* key, const std::string& tag) {
    if (record.contains(key) && record[key].is_number()) scalar(tag, record[key].get<double>(), samples);
  };
  number("loss", "Train/Samples/train_loss");
  number("lr", "Train/Samples/lr");
  number("loss_scale", "Train/Samples/loss_scale");
  number("grad_norm", "Train/Samples/grad_norm");
  number("tokens_per_s", "Train/Samples/tokens_per_s");
  number("eval_loss", "Train/Samples/eval_loss");
  if (record.contains("timeline") && record["timeline"].contains("bytes"))
    for (const auto& [edge, bytes] : record["timeline"]["bytes"].items())
      if (bytes.is_number()) scalar("Train/Samples/bytes_" + edge, bytes.get<double>(), samples);
  if (tensorboard_) tensorboard_->flush();
}

void RunMonitors::scalar(const std::string& tag, double value, int64_t samples) {
  if (tensorboard_) tensorboard_->scalar(tag, value, samples);
  if (csv_dir_.empty()) return;
  std::string file = tag;
  for (char& c : file)
    if (c == '/' || c == ' ') c = '_';
  const std::string path = csv_dir_ + "/" + file + ".csv";
  // A file this run has not written yet starts with its header, unless a resumed run's is there.
  const bool header = !csv_files_.count(path) && !(std::filesystem::exists(path) && std::filesystem::file_size(path));
  csv_files_.insert(path);
  std::ofstream out(path, std::ios::app);
  if (header) out << "step," << tag.substr(tag.rfind('/') + 1) << "\n";
  char text[32];
  const auto end = std::to_chars(text, text + sizeof text, value).ptr;  // the shortest that reads back
  out << samples << "," << std::string_view(text, size_t(end - text)) << "\n";
  STRATA_CHECK(out.good(), "writing '" + path + "' failed: " + std::strerror(errno), "is the disk full?");
}

}  // namespace strata
