// The gradient-bucket kernels (kernels/cuda/bucket.cuh): flatten places scaled copies of
// many tensors at their offsets in one flat buffer, unflatten copies them back. Each
// element is one multiplication, correctly rounded on every device and on the host, so
// every comparison here is exact (rtol 0): against x * scale computed in the kernel's
// compute type (float for float32 and 16-bit types, double for float64), and round trips
// through scales that are powers of two are bit for bit.
#include <gtest/gtest.h>

#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cuda/bucket.cuh"
#include "tests/cuda/harness.h"

namespace ember::kernels::cuda {
namespace {

using test::DeviceArray;

// x * scale as the kernel computes it, as a double.
template <class T>
double scaled(double x, double scale) {
  using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
  return test::to_double(test::from_double<T>(double(C(x) * C(scale))));
}

// Tensors of the given sizes on the device, the i-th `i % 2` elements past an aligned
// address, with slots packed in the flat buffer `gap` elements apart (so a gap of 3 gives
// misaligned ranges in flat as well).
template <class T>
struct Bucket {
  std::vector<std::vector<double>> values;  // each tensor's values
  std::vector<std::unique_ptr<DeviceArray<T>>> tensors;
  std::vector<BucketSlot<T>> slots;
  int64_t flat_numel = 0;

  Bucket(const std::vector<int64_t>& sizes, int64_t gap, uint32_t seed) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      std::vector<double> v = test::random_doubles(size_t(sizes[i]), seed + uint32_t(i));
      for (double& x : v) x = test::to_double(test::from_double<T>(x));
      tensors.push_back(std::make_unique<DeviceArray<T>>(test::from_doubles<T>(v), i % 2));
      slots.push_back({tensors.back()->data(), sizes[i], flat_numel});
      values.push_back(std::move(v));
      flat_numel += sizes[i] + gap;
    }
  }
  // What flat should hold after flatten with `scale`: NaN (the poison) in the gaps.
  std::vector<double> flat_want(double scale) const {
    std::vector<double> want(size_t(flat_numel), NAN);
    for (size_t i = 0; i < slots.size(); ++i)
      for (int64_t j = 0; j < slots[i].numel; ++j) want[size_t(slots[i].offset + j)] = scaled<T>(values[i][j], scale);
    return want;
  }
};

std::vector<int64_t> awkward_sizes() {
  std::vector<int64_t> sizes = test::kAwkwardSizes;
  sizes.push_back(70001);  // many tiles: blocks take several turns
  for (int64_t n : test::kAwkwardSizes) sizes.push_back(n);
  return sizes;
}

// flatten with a scale that rounds; flatten and unflatten with inverse powers of two,
// which give back the values bit for bit; unflatten with a scale that rounds.
template <class T>
void check_flatten_unflatten(const std::vector<int64_t>& sizes) {
  Bucket<T> b(sizes, 3, 10);
  DeviceArray<T> flat(size_t(b.flat_numel));
  bucket_flatten<T>(b.slots, flat.data(), b.flat_numel, 1.0 / 3, nullptr);
  EXPECT_TRUE(test::all_close(flat.host(), b.flat_want(1.0 / 3), 0)) << "flatten, scale 1/3";

  // Doubling cannot overflow values in [-2, 2] (halving could underflow f16's smallest).
  bucket_flatten<T>(b.slots, flat.data(), b.flat_numel, 2.0, nullptr);
  EXPECT_TRUE(test::all_close(flat.host(), b.flat_want(2.0), 0)) << "flatten, scale 2";
  std::vector<std::unique_ptr<DeviceArray<T>>> back;  // fresh, poisoned tensors
  std::vector<BucketSlot<T>> back_slots;
  for (size_t i = 0; i < b.slots.size(); ++i) {
    back.push_back(std::make_unique<DeviceArray<T>>(size_t(b.slots[i].numel), (i + 1) % 2));
    back_slots.push_back({back.back()->data(), b.slots[i].numel, b.slots[i].offset});
  }
  bucket_unflatten<T>(flat.data(), b.flat_numel, back_slots, 0.5, nullptr);
  for (size_t i = 0; i < back.size(); ++i)
    EXPECT_TRUE(test::all_close(back[i]->host(), b.values[i], 0)) << "round trip of tensor " << i;

  bucket_unflatten<T>(flat.data(), b.flat_numel, back_slots, 1.0 / 3, nullptr);
  for (size_t i = 0; i < back.size(); ++i) {
    std::vector<double> want(b.values[i].size());
    for (size_t j = 0; j < want.size(); ++j) want[j] = scaled<T>(scaled<T>(b.values[i][j], 2.0), 1.0 / 3);
    EXPECT_TRUE(test::all_close(back[i]->host(), want, 0)) << "unflatten, scale 1/3, tensor " << i;
  }
}

TEST(CudaBucket, FlattenAndUnflattenScaleExactlyOnAwkwardSizesAndAlignments) {
  EMBER_NEED_DEVICE();
  check_flatten_unflatten<float>(awkward_sizes());
}

TEST(CudaBucket, Float64Bf16AndHalfBuckets) {
  EMBER_NEED_DEVICE();
  check_flatten_unflatten<double>(awkward_sizes());
  check_flatten_unflatten<__nv_bfloat16>(awkward_sizes());
  check_flatten_unflatten<__half>(awkward_sizes());
}

TEST(CudaBucket, MoreSlotsThanOneLaunchHolds) {
  EMBER_NEED_DEVICE();
  const size_t count = 2 * TensorListMeta<2>::kMaxTensors + 13;  // 3 launches each way
  std::vector<int64_t> sizes;
  for (double s : test::random_doubles(count, 5, 0, 51)) sizes.push_back(int64_t(s));
  check_flatten_unflatten<float>(sizes);
}

TEST(CudaBucket, SlotsThatAreViewsOfTheFlatBufferScaleInPlace) {
  EMBER_NEED_DEVICE();
  // Gradients stored as views into the bucket: flatten only applies the scale.
  const std::vector<double> v = test::random_doubles(5000, 3);
  DeviceArray<float> flat(test::from_doubles<float>(v));
  std::vector<BucketSlot<float>> slots;
  for (int64_t start : {0, 1, 33, 1057, 4000}) slots.push_back({flat.data() + start, 0, start});
  for (size_t i = 0; i + 1 < slots.size(); ++i) slots[i].numel = slots[i + 1].offset - slots[i].offset;
  slots.back().numel = 1000;
  bucket_flatten<float>(slots, flat.data(), 5000, 0.125, nullptr);
  std::vector<double> want(v.size());
  for (size_t j = 0; j < v.size(); ++j) want[j] = scaled<float>(float(v[j]), 0.125);
  EXPECT_TRUE(test::all_close(flat.host(), want, 0));
}

TEST(CudaBucket, EmptyBucketsLaunchNothing) {
  EMBER_NEED_DEVICE();
  EXPECT_NO_THROW(bucket_flatten<float>(std::span<const BucketSlot<float>>(), nullptr, 0, 0.5, nullptr));
  const std::vector<BucketSlot<float>> empties(300, BucketSlot<float>{nullptr, 0, 0});
  EXPECT_NO_THROW(bucket_flatten<float>(empties, nullptr, 0, 0.5, nullptr));
  EXPECT_NO_THROW(bucket_unflatten<float>(nullptr, 0, empties, 0.5, nullptr));
}

TEST(CudaBucket, BadSlotsAreErrors) {
  EMBER_NEED_DEVICE();
  DeviceArray<float> flat(100), a(10), b(10);
  using Slot = BucketSlot<float>;
  const auto flatten_error = [&](const std::vector<Slot>& slots, int64_t flat_numel = 100) -> std::string {
    try {
      bucket_flatten<float>(slots, flat.data(), flat_numel, 1.0, nullptr);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(flatten_error({{a.data(), 10, 0}, {b.data(), 10, 5}}).find("slots 0 and 1 overlap in the flat buffer"),
            std::string::npos);
  EXPECT_NE(flatten_error({{a.data(), 10, 95}}).find("slot 0 (10 elements at offset 95) does not fit"),
            std::string::npos);
  EXPECT_NE(flatten_error({{a.data(), -1, 0}}).find("does not fit"), std::string::npos);
  EXPECT_NE(flatten_error({{a.data(), 10, -1}}).find("does not fit"), std::string::npos);
  EXPECT_NE(flatten_error({{a.data(), 10, 0}, {nullptr, 10, 10}}).find("slot 1 (10 elements) has a null tensor"),
            std::string::npos);
  EXPECT_NE(flatten_error({}, -1).find("the flat buffer has -1 elements"), std::string::npos);
  EXPECT_THROW(bucket_flatten<float>(std::vector<Slot>{{a.data(), 10, 0}}, nullptr, 100, 1.0, nullptr), Error);
  // unflatten writes the tensors: reading overlapping ranges is fine, writing one tensor twice is not.
  EXPECT_NO_THROW(bucket_unflatten<float>(flat.data(), 100, std::vector<Slot>{{a.data(), 10, 0}, {b.data(), 10, 5}},
                                          1.0, nullptr));
  try {
    bucket_unflatten<float>(flat.data(), 100, std::vector<Slot>{{a.data(), 10, 0}, {a.data() + 5, 5, 50}}, 1.0,
                            nullptr);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("slots 0 and 1 have overlapping tensors"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ember::kernels::cuda
