// TensorBoard's event files, written without TensorFlow or protobuf: each record is TFRecord's
// framing (u64 length, masked CRC-32C of the length, the bytes, masked CRC-32C of the bytes,
// little-endian) around one serialized tensorboard.Event message, encoded here by hand: the
// messages are three (Event, Summary, Summary.Value) and only their scalar fields are written.
// (Debian's libprotobuf would encode the messages but not the framing, and would need
// TensorBoard's .proto files compiled at build time.) The `tensorboard` package's event
// reader reads what this writes (tests: cli.tensorboard).
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace strata::io {

// CRC-32C (Castagnoli), as TFRecord checks its lengths and payloads; and its masked form.
uint32_t crc32c(const void* data, size_t n);
uint32_t masked_crc32c(const void* data, size_t n);

class TfEventWriter {
 public:
  // Creates DIR and DIR/events.out.tfevents.<unix seconds>.<host>.<pid>, writing the file's
  // first event (its file_version).
  explicit TfEventWriter(const std::string& dir);
  ~TfEventWriter();
  TfEventWriter(const TfEventWriter&) = delete;
  TfEventWriter& operator=(const TfEventWriter&) = delete;

  // One scalar at a step (the x axis TensorBoard plots it over), stamped with the wall time.
  void scalar(std::string_view tag, double value, int64_t step);
  void flush();  // fflush: a reader sees every record written so far
  const std::string& path() const { return path_; }

 private:
  void record(const std::string& event);
  std::string path_;
  std::FILE* f_ = nullptr;
};

}  // namespace strata::io
