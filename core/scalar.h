// A number passed to an op (fill value, clamp bound, scalar operand): an integer, a
// floating value or a bool, remembered as such so that `int_tensor + 2` stays integral
// and `int_tensor + 2.5` promotes to float32, as in PyTorch.
#pragma once

#include <cstdint>
#include <type_traits>

namespace ember {

class Scalar {
 public:
  enum class Kind : uint8_t { Bool, Int, Float };

  Scalar() : Scalar(int64_t(0)) {}
  template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  Scalar(T v) : kind_(Kind::Int), i_(static_cast<int64_t>(v)), d_(static_cast<double>(v)) {}  // NOLINT
  template <class T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  Scalar(T v) : kind_(Kind::Float), i_(0), d_(static_cast<double>(v)) {}  // NOLINT
  Scalar(bool v) : kind_(Kind::Bool), i_(v), d_(v) {}  // NOLINT

  Kind kind() const { return kind_; }
  bool is_integral() const { return kind_ != Kind::Float; }
  double to_double() const { return d_; }
  int64_t to_int() const { return kind_ == Kind::Float ? static_cast<int64_t>(d_) : i_; }

 private:
  Kind kind_;
  int64_t i_;
  double d_;
};

}  // namespace ember
