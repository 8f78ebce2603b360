// Collectives across data-parallel ranks, on typed spans (element counts, never bytes).
//
// Every implementation counts the elements this rank sends, by the ring algorithms'
// volumes that nccl-tests' bus bandwidth is defined by (N ranks, `count` elements):
//   all_reduce      2·(N-1)/N·count      reduce_scatter  (N-1)·count_out
//   all_gather      (N-1)·count_in       broadcast       count (pipelined ring)
// so ZeRO's communication volume is measured, not computed (S3 accounting tests).
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>

namespace strata {

enum class ReduceOp { sum, max, min };
// u16 carries bf16/f16 payloads through gathers and broadcasts (never reduced).
enum class CommType { f32, f64, i32, i64, u8, u16 };

template <typename T>
constexpr CommType comm_type_of();
template <>
constexpr CommType comm_type_of<float>() {
  return CommType::f32;
}
template <>
constexpr CommType comm_type_of<double>() {
  return CommType::f64;
}
template <>
constexpr CommType comm_type_of<int32_t>() {
  return CommType::i32;
}
template <>
constexpr CommType comm_type_of<int64_t>() {
  return CommType::i64;
}
template <>
constexpr CommType comm_type_of<uint8_t>() {
  return CommType::u8;
}
template <>
constexpr CommType comm_type_of<uint16_t>() {
  return CommType::u16;
}
std::string_view comm_type_name(CommType t);

struct CommCounters {
  uint64_t elements_sent = 0;  // by the ring volumes above
  uint64_t bytes_sent = 0;     // the same volumes in bytes of each call's element type
  uint64_t calls = 0;
};
size_t comm_type_size(CommType t);

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string host() const = 0;

  template <typename T>
  void all_reduce(std::span<T> data, ReduceOp op = ReduceOp::sum) {
    if (test_hook_) [[unlikely]]
      test_hook_("all_reduce");
    do_all_reduce(data.data(), comm_type_of<T>(), data.size(), op);
  }
  // in has size()·out.size() elements; rank r receives the reduced block r.
  template <typename T>
  void reduce_scatter(std::span<const T> in, std::span<T> out) {
    check_blocks("reduce_scatter", in.size(), out.size());
    if (test_hook_) [[unlikely]]
      test_hook_("reduce_scatter");
    do_reduce_scatter(in.data(), out.data(), comm_type_of<T>(), out.size());
  }
  // out has size()·in.size() elements; block r is rank r's input.
  template <typename T>
  void all_gather(std::span<const T> in, std::span<T> out) {
    check_blocks("all_gather", out.size(), in.size());
    if (test_hook_) [[unlikely]]
      test_hook_("all_gather");
    do_all_gather(in.data(), out.data(), comm_type_of<T>(), in.size());
  }
  template <typename T>
  void broadcast(std::span<T> data, int root) {
    if (test_hook_) [[unlikely]]
      test_hook_("broadcast");
    do_broadcast(data.data(), comm_type_of<T>(), data.size(), root);
  }
  virtual void barrier() = 0;

  const CommCounters& counters() const { return counters_; }
  // Test seam: called (on the calling thread) before every collective; lets a test delay a
  // collective until the compute thread has made progress, which proves overlap.
  void set_test_hook(std::function<void(std::string_view op)> hook) { test_hook_ = std::move(hook); }
  void reset_counters() { counters_ = {}; }

 protected:
  virtual void do_all_reduce(void* data, CommType t, size_t count, ReduceOp op) = 0;
  virtual void do_reduce_scatter(const void* in, void* out, CommType t, size_t count_out) = 0;
  virtual void do_all_gather(const void* in, void* out, CommType t, size_t count_in) = 0;
  virtual void do_broadcast(void* data, CommType t, size_t count, int root) = 0;
  void count_sent(double elements, CommType t) {
    const uint64_t n = uint64_t(elements + 0.5);
    counters_.elements_sent += n;
    counters_.bytes_sent += n * comm_type_size(t);
    ++counters_.calls;
  }

 private:
  void check_blocks(const char* op, size_t whole, size_t block) const;
  CommCounters counters_;
  std::function<void(std::string_view)> test_hook_;
};

}  // namespace strata
