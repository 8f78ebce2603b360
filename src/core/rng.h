// Deterministic random numbers independent of the standard library's implementation:
// SplitMix64 for seeding, xoshiro256** for the stream, Box-Muller for normals.
#pragma once
#include <cmath>
#include <cstdint>

namespace strata {

inline uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

class Rng {
 public:
  explicit Rng(uint64_t seed, uint64_t stream = 0) {
    uint64_t x = seed ^ (stream * 0xd1b54a32d192ed03ull);
    for (auto& s : s_) s = splitmix64(x);
  }
  uint64_t next_u64() {
    const uint64_t r = rotl(s_[1] * 5, 7) * 9, t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return r;
  }
  double uniform() { return double(next_u64() >> 11) * 0x1p-53; }  // [0, 1)
  uint64_t below(uint64_t n) { return n ? next_u64() % n : 0; }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

class NormalRng {
 public:
  NormalRng(uint64_t seed, uint64_t stream) : rng_(seed, stream) {}
  float next() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u1 = rng_.uniform(), u2 = rng_.uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    const double r = std::sqrt(-2.0 * std::log(u1)), th = 6.283185307179586 * u2;
    spare_ = float(r * std::sin(th));
    has_spare_ = true;
    return float(r * std::cos(th));
  }

 private:
  Rng rng_;
  bool has_spare_ = false;
  float spare_ = 0;
};

}  // namespace strata
