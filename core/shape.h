// Shapes and strides (in elements), and the helpers ops use to check and combine them.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace ember {

using Shape = std::vector<int64_t>;

// "[2, 3, 4]"
std::string shape_str(const Shape& s);
int64_t shape_numel(const Shape& s);
// Row-major strides of a contiguous tensor of this shape.
Shape contiguous_strides(const Shape& s);
// The shape two operands broadcast to (NumPy rules); throws ember::Error naming `op`.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Maps a dim in [-ndim, ndim) to [0, ndim); throws ember::Error naming `op` otherwise.
int64_t normalize_dim(int64_t dim, int64_t ndim, const char* op);

}  // namespace ember
