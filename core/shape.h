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
// The element count; exact for any shape that passed check_shape.
int64_t shape_numel(const Shape& s);
// Throws ember::Error naming `op` unless every dim is >= 0 and the dims, each counted as
// at least 1, multiply to at most INT64_MAX: that bounds the strides as well as the element
// count, which a zero dim would otherwise keep at 0 while the strides overflow.
void check_shape(const Shape& s, const char* op);
// Row-major strides of a contiguous tensor of this shape.
Shape contiguous_strides(const Shape& s);
// The shape two operands broadcast to (NumPy rules); throws ember::Error naming `op`.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Maps a dim in [-ndim, ndim) to [0, ndim); throws ember::Error naming `op` otherwise.
int64_t normalize_dim(int64_t dim, int64_t ndim, const char* op);

}  // namespace ember
