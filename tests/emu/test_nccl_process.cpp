// The emulated NCCL (kernels/emu/nccl.cpp) with ranks as processes: this binary started
// again (tests/comm/process_util.h), each process seeing one device as device 0 through
// CUDA_VISIBLE_DEVICES; a device fault, and two processes on one device.
// Only in the EMBER_CUDA=EMULATED build, whose libember defines the NCCL API.
#if defined(EMBER_CUDA_EMULATED)

#include <gtest/gtest.h>
#include <nccl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/comm/process_util.h"
#include "tests/emu/nccl_test_util.h"

namespace {

using namespace ember::emu_nccl_test;

std::string to_hex(const ncclUniqueId& id) {
  std::string s;
  char b[3];
  for (char c : id.internal) {
    std::snprintf(b, sizeof b, "%02x", static_cast<unsigned char>(c));
    s += b;
  }
  return s;
}

ncclUniqueId from_hex(const std::string& s) {
  ncclUniqueId id{};
  for (size_t i = 0; i < sizeof id.internal && 2 * i + 1 < s.size(); ++i)
    id.internal[i] = static_cast<char>(std::stoi(s.substr(2 * i, 2), nullptr, 16));
  return id;
}

TEST(EmuNcclProcess, Worker) {
  if (!ember::comm::testing::is_worker()) GTEST_SKIP() << "a rank started by the EmuNcclProcess tests";
  const int rank = std::atoi(std::getenv("RANK")), world = std::atoi(std::getenv("WORLD_SIZE"));
  const bool expect_duplicate = std::getenv("EXPECT_DUPLICATE") != nullptr;
  const ncclUniqueId id = from_hex(std::getenv("NCCL_ID_HEX"));
  CUDA_OK(cudaSetDevice(std::atoi(std::getenv("DEVICE"))));
  ncclComm_t comm = nullptr;
  const ncclResult_t init = ncclCommInitRank(&comm, world, id, rank);
  if (expect_duplicate) {
    ASSERT_EQ(init, ncclInvalidUsage);
    ASSERT_NE(std::string(ncclGetLastError(nullptr)).find("Duplicate GPU detected"), std::string::npos);
    return;
  }
  NCCL_OK(init);
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  const Dtype& f32 = dtypes()[7];
  const Dtype& i32 = dtypes()[2];
  ASSERT_EQ(f32.type, ncclFloat32);
  ASSERT_EQ(i32.type, ncclInt32);
  void* send = device_input(f32, rank, kBig, stream);
  NCCL_OK(ncclAllReduce(send, send, kBig, ncclFloat32, ncclSum, comm, stream));
  expect_matches(f32, to_host(send, kBig * 4, stream), kBig, [&](size_t i) { return reference(f32, ncclSum, world, i); },
                 "process ncclAllReduce");
  void* in = device_input(i32, rank, 1023, stream);
  void* out = nullptr;
  CUDA_OK(cudaMalloc(&out, 1023 * 4 * static_cast<size_t>(world)));
  NCCL_OK(ncclAllGather(in, out, 1023, ncclInt32, comm, stream));
  expect_matches(i32, to_host(out, 1023 * 4 * static_cast<size_t>(world), stream), 1023 * static_cast<size_t>(world),
                 [&](size_t i) { return input(i32, static_cast<int>(i / 1023), i % 1023); }, "process ncclAllGather");
  NCCL_OK(ncclCommDestroy(comm));
  for (void* p : {send, in, out}) CUDA_OK(cudaFree(p));
  CUDA_OK(cudaStreamDestroy(stream));
}

// Rank r sees the devices visible[r] and uses device[r] of them.
void run_processes(const std::vector<std::string>& visible, const std::vector<int>& device, bool expect_duplicate) {
  setenv("EMBER_EMU_NCCL_SLOT_BYTES", std::to_string(kSlotBytes).c_str(), 1);
  ncclUniqueId id;
  NCCL_OK(ncclGetUniqueId(&id));
  std::vector<pid_t> pids;
  for (size_t r = 0; r < visible.size(); ++r) {
    std::vector<std::string> env = {"RANK=" + std::to_string(r), "WORLD_SIZE=" + std::to_string(visible.size()),
                                    "NCCL_ID_HEX=" + to_hex(id), "CUDA_VISIBLE_DEVICES=" + visible[r], "DEVICE=" + std::to_string(device[r]),
                                    "EMBER_EMU_DEVICES=4"};
    if (expect_duplicate) env.push_back("EXPECT_DUPLICATE=1");
    pids.push_back(ember::comm::testing::spawn_self("EmuNcclProcess.Worker", env));
    ASSERT_GT(pids.back(), 0);
  }
  const std::vector<int> codes = ember::comm::testing::wait_all(pids);
  for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], 0) << "rank " << r << " (its output is above)";
  EXPECT_FALSE(segment_exists(id)) << "the shared-memory segment was left in /dev/shm";
}

void throwing_host_fn(void*) { throw std::runtime_error("a fault staged by the test"); }

// A device that fails (a sticky error) drops its queued work: a collective queued behind
// the fault never runs, and ncclCommDestroy, which waits for the comm's work, still returns.
TEST(EmuNcclProcess, FailedDeviceWorker) {
  if (!ember::comm::testing::is_worker()) GTEST_SKIP() << "started by EmuNcclProcess.DestroyAfterADeviceFault";
  alarm(20);  // a hang ends the process, and the parent reports it
  ncclUniqueId id;
  NCCL_OK(ncclGetUniqueId(&id));
  ncclComm_t comm = nullptr;
  NCCL_OK(ncclCommInitRank(&comm, 1, id, 0));
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  float* buf = nullptr;
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&buf), 64 * sizeof(float)));
  CUDA_OK(cudaLaunchHostFunc(stream, slow_host_fn, nullptr));
  CUDA_OK(cudaLaunchHostFunc(stream, throwing_host_fn, nullptr));
  NCCL_OK(ncclAllReduce(buf, buf, 64, ncclFloat32, ncclSum, comm, stream));
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaErrorLaunchFailure);
  EXPECT_EQ(ncclAllReduce(buf, buf, 64, ncclFloat32, ncclSum, comm, stream), ncclUnhandledCudaError);
  NCCL_OK(ncclCommDestroy(comm));
}

TEST(EmuNcclProcess, DestroyAfterADeviceFault) {
  const pid_t pid = ember::comm::testing::spawn_self("EmuNcclProcess.FailedDeviceWorker", {});
  ASSERT_GT(pid, 0);
  EXPECT_EQ(ember::comm::testing::wait_all({pid})[0], 0) << "(its output is above)";
}

// Both processes call their device cuda:0, but they are different emulated devices.
TEST(EmuNcclProcess, TwoProcesses) { run_processes({"1", "0"}, {0, 0}, false); }

// Different numbers, same emulated device: NCCL's duplicate-GPU error.
TEST(EmuNcclProcess, TwoProcessesOnOneDeviceAreInvalidUsage) { run_processes({"2", "0,2"}, {0, 1}, true); }

}  // namespace

#endif  // EMBER_CUDA_EMULATED
