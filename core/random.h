// The random number generator: a counter-based Philox 4x32-10 stream, so that each
// element's numbers depend only on (seed, offset, element index). The CPU backend and
// the CUDA backend therefore draw the same integers, bit for bit, in any order and on any
// number of threads. A draw of n elements consumes a whole number of 128-bit blocks and
// advances the generator's offset past them.
#pragma once

#include <cstdint>

namespace ember {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0x853c49e6748fea9bULL) : seed_(seed) {}
  void manual_seed(uint64_t seed) {
    seed_ = seed;
    offset_ = 0;
  }
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_offset(uint64_t offset) { offset_ = offset; }
  // Reserves `blocks` Philox blocks and returns the offset of the first.
  uint64_t advance(uint64_t blocks) {
    uint64_t start = offset_;
    offset_ += blocks;
    return start;
  }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The generator ops use when none is passed. Not thread-safe: seed it before threads use it.
Generator& default_generator();
// Seeds the default generator (and resets its offset).
void manual_seed(uint64_t seed);

}  // namespace ember
