// The emulated NCCL (kernels/emu/nccl.cpp), through the NCCL API: ranks as threads, each
// on its own emulated device (ctest sets EMBER_EMU_DEVICES=4; test_nccl_process.cpp has
// the ranks as processes). Every
// collective, op and data type against a float64 or exact integer reference computed here,
// world sizes 1-4, counts 0, 1, 1023 and one of several slot-sized chunks (the tests make
// the slot 8 KiB); in-place; stream order; abort; grouped init; the first collective's
// connection; non-blocking communicators; argument errors.
// Only in the EMBER_CUDA=EMULATED build, whose libember defines the NCCL API.
#if defined(EMBER_CUDA_EMULATED)

#include <gtest/gtest.h>
#include <nccl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "tests/emu/nccl_test_util.h"

namespace {

using namespace ember::emu_nccl_test;

int device_count() {
  int n = 0;
  cudaGetDeviceCount(&n);
  return n;
}

// Runs fn(rank, comm, stream) on `world` threads, rank r on device r, then synchronises,
// destroys, and checks that no shared-memory segment is left behind.
// slot_bytes 0: the default slot.
void run_ranks(int world, const std::function<void(int, ncclComm_t, cudaStream_t)>& fn, size_t slot_bytes = kSlotBytes) {
  ASSERT_GE(device_count(), world) << "needs EMBER_EMU_DEVICES >= " << world << " (ctest sets 4)";
  if (slot_bytes) setenv("EMBER_EMU_NCCL_SLOT_BYTES", std::to_string(slot_bytes).c_str(), 1);
  else unsetenv("EMBER_EMU_NCCL_SLOT_BYTES");
  ncclUniqueId id;
  NCCL_OK(ncclGetUniqueId(&id));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      CUDA_OK(cudaSetDevice(r));
      ncclComm_t comm = nullptr;
      NCCL_OK(ncclCommInitRank(&comm, world, id, r));
      int n = 0, rank = -1, device = -1;
      NCCL_OK(ncclCommCount(comm, &n));
      NCCL_OK(ncclCommUserRank(comm, &rank));
      NCCL_OK(ncclCommCuDevice(comm, &device));
      EXPECT_EQ(n, world);
      EXPECT_EQ(rank, r);
      EXPECT_EQ(device, r);
      cudaStream_t stream = nullptr;
      CUDA_OK(cudaStreamCreate(&stream));
      fn(r, comm, stream);
      CUDA_OK(cudaStreamSynchronize(stream));
      ncclResult_t async = ncclInternalError;
      NCCL_OK(ncclCommGetAsyncError(comm, &async));
      EXPECT_EQ(async, ncclSuccess);
      NCCL_OK(ncclCommFinalize(comm));
      NCCL_OK(ncclCommDestroy(comm));
      CUDA_OK(cudaStreamDestroy(stream));
    });
  for (auto& t : threads) t.join();
  EXPECT_FALSE(segment_exists(id)) << "the shared-memory segment was left in /dev/shm";
}


// Every collective, op, type and count on `world` ranks, out of place into fresh (NaN)
// device memory. Where a rank has no output (ncclReduce off the root) it stays untouched.
void all_collectives(int world) {
  run_ranks(world, [world](int rank, ncclComm_t comm, cudaStream_t stream) {
    const int root = world - 1;
    for (const Dtype& d : dtypes())
      for (size_t count : kCounts) {
        const std::string at = "world " + std::to_string(world) + " rank " + std::to_string(rank) + " count " +
                               std::to_string(count);
        // ncclAllReduce, ncclReduce, ncclReduceScatter with every op.
        for (ncclRedOp_t op : kOps) {
          const std::string with = at + " op " + std::to_string(op);
          void* send = device_input(d, rank, count, stream);
          void *all = nullptr, *red = nullptr, *scattered = nullptr;
          CUDA_OK(cudaMalloc(&all, std::max<size_t>(count, 1) * d.size));
          CUDA_OK(cudaMalloc(&red, std::max<size_t>(count, 1) * d.size));
          NCCL_OK(ncclAllReduce(send, all, count, d.type, op, comm, stream));
          NCCL_OK(ncclReduce(send, red, count, d.type, op, root, comm, stream));
          const size_t part = count / static_cast<size_t>(world);  // reduce-scatter: each rank's part
          CUDA_OK(cudaMalloc(&scattered, std::max<size_t>(part, 1) * d.size));
          NCCL_OK(ncclReduceScatter(send, scattered, part, d.type, op, comm, stream));
          expect_matches(d, to_host(all, count * d.size, stream), count,
                         [&](size_t i) { return reference(d, op, world, i); }, "ncclAllReduce " + with);
          const std::vector<char> reduced = to_host(red, count * d.size, stream);
          if (rank == root)
            expect_matches(d, reduced, count, [&](size_t i) { return reference(d, op, world, i); }, "ncclReduce " + with);
          else
            for (char c : reduced) ASSERT_EQ(c, char(0xFF)) << "ncclReduce wrote a non-root output " << with;
          expect_matches(d, to_host(scattered, part * d.size, stream), part,
                         [&](size_t i) { return reference(d, op, world, i, static_cast<size_t>(rank) * part); },
                         "ncclReduceScatter " + with);
          for (void* p : {send, all, red, scattered}) CUDA_OK(cudaFree(p));
        }
        // ncclBroadcast from the last rank, ncclAllGather.
        void* send = device_input(d, rank, count, stream);
        void *bcast = nullptr, *gathered = nullptr;
        CUDA_OK(cudaMalloc(&bcast, std::max<size_t>(count, 1) * d.size));
        CUDA_OK(cudaMalloc(&gathered, std::max<size_t>(count * static_cast<size_t>(world), 1) * d.size));
        NCCL_OK(ncclBroadcast(send, bcast, count, d.type, root, comm, stream));
        NCCL_OK(ncclAllGather(send, gathered, count, d.type, comm, stream));
        expect_matches(d, to_host(bcast, count * d.size, stream), count, [&](size_t i) { return input(d, root, i); },
                       "ncclBroadcast " + at);
        expect_matches(d, to_host(gathered, count * static_cast<size_t>(world) * d.size, stream),
                       count * static_cast<size_t>(world),
                       [&](size_t i) { return input(d, static_cast<int>(i / count), i % count); }, "ncclAllGather " + at);
        for (void* p : {send, bcast, gathered}) CUDA_OK(cudaFree(p));
      }
  });
}

TEST(EmuNccl, EveryCollectiveOpAndTypeOnOneRank) { all_collectives(1); }
TEST(EmuNccl, EveryCollectiveOpAndTypeOnTwoRanks) { all_collectives(2); }
TEST(EmuNccl, EveryCollectiveOpAndTypeOnThreeRanks) { all_collectives(3); }
TEST(EmuNccl, EveryCollectiveOpAndTypeOnFourRanks) { all_collectives(4); }

// All ranks end with bitwise the same all-reduce, inexact sums included.
TEST(EmuNccl, AllRanksAgreeBitwise) {
  constexpr int world = 4;
  constexpr size_t count = 3000;
  std::vector<std::vector<float>> results(world);
  run_ranks(world, [&](int rank, ncclComm_t comm, cudaStream_t stream) {
    std::vector<float> host(count);
    for (size_t i = 0; i < count; ++i) host[i] = std::sin(float(i * 13 + rank)) * 1e3f + 1e-3f * float(rank);
    float* buf = nullptr;
    CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&buf), count * sizeof(float)));
    CUDA_OK(cudaMemcpyAsync(buf, host.data(), count * sizeof(float), cudaMemcpyHostToDevice, stream));
    NCCL_OK(ncclAllReduce(buf, buf, count, ncclFloat32, ncclAvg, comm, stream));
    results[static_cast<size_t>(rank)] = std::vector<float>(count);
    CUDA_OK(cudaMemcpyAsync(results[static_cast<size_t>(rank)].data(), buf, count * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CUDA_OK(cudaFree(buf));
  });
  for (int r = 1; r < world; ++r)
    EXPECT_EQ(std::memcmp(results[0].data(), results[static_cast<size_t>(r)].data(), count * sizeof(float)), 0) << "rank " << r;
}

// The default slot (4 MiB, as no EMBER_EMU_NCCL_SLOT_BYTES): a 20 MB all-reduce in chunks.
TEST(EmuNccl, LargeAllReduceWithTheDefaultSlot) {
  constexpr size_t count = 5'000'000;
  run_ranks(2, [&](int rank, ncclComm_t comm, cudaStream_t stream) {
    std::vector<float> host(count);
    for (size_t i = 0; i < count; ++i) host[i] = float(i % 1000) + float(rank);
    float* buf = nullptr;
    CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&buf), count * sizeof(float)));
    CUDA_OK(cudaMemcpyAsync(buf, host.data(), count * sizeof(float), cudaMemcpyHostToDevice, stream));
    NCCL_OK(ncclAllReduce(buf, buf, count, ncclFloat32, ncclMax, comm, stream));
    CUDA_OK(cudaMemcpyAsync(host.data(), buf, count * sizeof(float), cudaMemcpyDeviceToHost, stream));
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(host[i], float(i % 1000) + 1.0f) << "element " << i;
    CUDA_OK(cudaFree(buf));
  }, /*slot_bytes=*/0);
}

// In place: all-reduce and reduce into their input, broadcast (ncclBcast), all-gather from
// the rank's own part of the output, reduce-scatter into the rank's part of the input.
TEST(EmuNccl, InPlace) {
  constexpr int world = 3;
  run_ranks(world, [&](int rank, ncclComm_t comm, cudaStream_t stream) {
    for (const Dtype& d : dtypes()) {
      if (d.type != ncclFloat32 && d.type != ncclBfloat16 && d.type != ncclInt64) continue;
      for (size_t count : {size_t(1023), kBig}) {
        const std::string at = std::string("rank ") + std::to_string(rank) + " count " + std::to_string(count);
        void* buf = device_input(d, rank, count, stream);
        NCCL_OK(ncclAllReduce(buf, buf, count, d.type, ncclSum, comm, stream));
        expect_matches(d, to_host(buf, count * d.size, stream), count,
                       [&](size_t i) { return reference(d, ncclSum, world, i); }, "in-place ncclAllReduce " + at);
        CUDA_OK(cudaFree(buf));

        buf = device_input(d, rank, count, stream);
        NCCL_OK(ncclReduce(buf, buf, count, d.type, ncclMax, 1, comm, stream));
        expect_matches(d, to_host(buf, count * d.size, stream), count,
                       [&](size_t i) { return rank == 1 ? reference(d, ncclMax, world, i) : input(d, rank, i); },
                       "in-place ncclReduce " + at);
        CUDA_OK(cudaFree(buf));

        buf = device_input(d, rank, count, stream);
        NCCL_OK(ncclBcast(buf, count, d.type, 2, comm, stream));
        expect_matches(d, to_host(buf, count * d.size, stream), count, [&](size_t i) { return input(d, 2, i); },
                       "ncclBcast " + at);
        CUDA_OK(cudaFree(buf));

        // The whole output, with this rank's input at its place in it.
        const size_t total = count * world;
        void* out = nullptr;
        CUDA_OK(cudaMalloc(&out, total * d.size));
        char* mine = static_cast<char*>(out) + static_cast<size_t>(rank) * count * d.size;
        void* in = device_input(d, rank, count, stream);
        CUDA_OK(cudaMemcpyAsync(mine, in, count * d.size, cudaMemcpyDeviceToDevice, stream));
        NCCL_OK(ncclAllGather(mine, out, count, d.type, comm, stream));
        expect_matches(d, to_host(out, total * d.size, stream), total,
                       [&](size_t i) { return input(d, static_cast<int>(i / count), i % count); }, "in-place ncclAllGather " + at);
        CUDA_OK(cudaFree(in));
        CUDA_OK(cudaFree(out));

        void* send = device_input(d, rank, total, stream);
        char* part = static_cast<char*>(send) + static_cast<size_t>(rank) * count * d.size;
        NCCL_OK(ncclReduceScatter(send, part, count, d.type, ncclSum, comm, stream));
        std::vector<char> got = to_host(part, count * d.size, stream);
        expect_matches(d, got, count,
                       [&](size_t i) { return reference(d, ncclSum, world, i, static_cast<size_t>(rank) * count); },
                       "in-place ncclReduceScatter " + at);
        CUDA_OK(cudaFree(send));
      }
    }
  });
}


// A copy queued on the stream behind slow work is seen by the collective queued after it;
// the collective call itself returns before any of it has run.
TEST(EmuNccl, RunsInStreamOrder) {
  constexpr size_t count = 2048;
  run_ranks(2, [&](int rank, ncclComm_t comm, cudaStream_t stream) {
    std::vector<float> host(count, float(rank + 1));
    float* buf = nullptr;
    CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&buf), count * sizeof(float)));
    CUDA_OK(cudaLaunchHostFunc(stream, slow_host_fn, nullptr));
    CUDA_OK(cudaMemcpyAsync(buf, host.data(), count * sizeof(float), cudaMemcpyHostToDevice, stream));
    NCCL_OK(ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, stream));
    EXPECT_EQ(cudaStreamQuery(stream), cudaErrorNotReady) << "the collective ran before its call returned";
    CUDA_OK(cudaMemcpyAsync(host.data(), buf, count * sizeof(float), cudaMemcpyDeviceToHost, stream));
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(host[i], 3.0f) << "element " << i;
    CUDA_OK(cudaFree(buf));
  });
}

// One thread makes three ranks inside a group (the inits meet at ncclGroupEnd) and queues
// a collective on each.
TEST(EmuNccl, GroupedInitFromOneThread) {
  constexpr int world = 3;
  ASSERT_GE(device_count(), world);
  ncclUniqueId id;
  NCCL_OK(ncclGetUniqueId(&id));
  ncclComm_t comms[world];
  cudaStream_t streams[world];
  double* bufs[world];
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < world; ++r) {
    CUDA_OK(cudaSetDevice(r));
    NCCL_OK(ncclCommInitRank(&comms[r], world, id, r));
  }
  NCCL_OK(ncclGroupEnd());
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < world; ++r) {
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaStreamCreate(&streams[r]));
    CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&bufs[r]), 100 * sizeof(double)));
    std::vector<double> host(100, r + 0.5);
    CUDA_OK(cudaMemcpyAsync(bufs[r], host.data(), 100 * sizeof(double), cudaMemcpyHostToDevice, streams[r]));
    NCCL_OK(ncclAllReduce(bufs[r], bufs[r], 100, ncclFloat64, ncclSum, comms[r], streams[r]));
  }
  NCCL_OK(ncclGroupEnd());
  for (int r = 0; r < world; ++r) {
    CUDA_OK(cudaSetDevice(r));
    std::vector<double> host(100);
    CUDA_OK(cudaMemcpyAsync(host.data(), bufs[r], 100 * sizeof(double), cudaMemcpyDeviceToHost, streams[r]));
    EXPECT_EQ(host[0], 0.5 + 1.5 + 2.5);
    EXPECT_EQ(host[99], 0.5 + 1.5 + 2.5);
    NCCL_OK(ncclCommDestroy(comms[r]));
    CUDA_OK(cudaFree(bufs[r]));
    CUDA_OK(cudaStreamDestroy(streams[r]));
  }
  EXPECT_FALSE(segment_exists(id));
}

// Rank 1 never calls the second collective: rank 0's work waits (its stream does not
// finish) until another thread aborts the comm; then the stream goes on and the comms
// report it.
TEST(EmuNccl, AbortReleasesARankWhosePeerNeverCalls) {
  ASSERT_GE(device_count(), 2);
  ncclUniqueId id;
  NCCL_OK(ncclGetUniqueId(&id));
  ncclComm_t comms[2];
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < 2; ++r) {
    CUDA_OK(cudaSetDevice(r));
    NCCL_OK(ncclCommInitRank(&comms[r], 2, id, r));
  }
  NCCL_OK(ncclGroupEnd());
  CUDA_OK(cudaSetDevice(0));
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  float* buf = nullptr;
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&buf), 64 * sizeof(float)));
  CUDA_OK(cudaSetDevice(1));
  cudaStream_t stream1;
  CUDA_OK(cudaStreamCreate(&stream1));
  float* buf1 = nullptr;
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&buf1), 64 * sizeof(float)));
  // Both ranks connect (their first collective, in a group as one thread drives both).
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclAllReduce(buf, buf, 64, ncclFloat32, ncclSum, comms[0], stream));
  NCCL_OK(ncclAllReduce(buf1, buf1, 64, ncclFloat32, ncclSum, comms[1], stream1));
  NCCL_OK(ncclGroupEnd());
  CUDA_OK(cudaStreamSynchronize(stream1));
  CUDA_OK(cudaSetDevice(0));
  CUDA_OK(cudaStreamSynchronize(stream));
  NCCL_OK(ncclAllReduce(buf, buf, 64, ncclFloat32, ncclSum, comms[0], stream));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(cudaStreamQuery(stream), cudaErrorNotReady) << "the all-reduce finished without its peer";
  ncclResult_t async = ncclInternalError;
  NCCL_OK(ncclCommGetAsyncError(comms[0], &async));
  EXPECT_EQ(async, ncclSuccess);
  std::thread watchdog([&] { EXPECT_EQ(ncclCommAbort(comms[0]), ncclSuccess); });
  watchdog.join();
  CUDA_OK(cudaStreamSynchronize(stream));  // released
  NCCL_OK(ncclCommGetAsyncError(comms[0], &async));
  EXPECT_NE(async, ncclSuccess);
  // The peer learns of it too, and its late collective is skipped, not hung.
  CUDA_OK(cudaSetDevice(1));
  NCCL_OK(ncclAllReduce(buf1, buf1, 64, ncclFloat32, ncclSum, comms[1], stream1));
  CUDA_OK(cudaStreamSynchronize(stream1));
  NCCL_OK(ncclCommGetAsyncError(comms[1], &async));
  EXPECT_EQ(async, ncclRemoteError);
  EXPECT_NE(std::string(ncclGetLastError(comms[1])).find("aborted"), std::string::npos) << ncclGetLastError(comms[1]);
  NCCL_OK(ncclCommDestroy(comms[1]));
  EXPECT_EQ(ncclCommDestroy(comms[0]), ncclInvalidUsage);  // abort freed it (a real NCCL would crash)
  CUDA_OK(cudaFree(buf1));
  CUDA_OK(cudaStreamDestroy(stream1));
  CUDA_OK(cudaSetDevice(0));
  CUDA_OK(cudaFree(buf));
  CUDA_OK(cudaStreamDestroy(stream));
  EXPECT_FALSE(segment_exists(id));
}

// Polls a non-blocking comm until its last call has ended (at most `limit`); its state.
ncclResult_t settle(ncclComm_t comm, std::chrono::milliseconds limit = std::chrono::milliseconds(10000)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  ncclResult_t state = ncclInProgress;
  while (ncclCommGetAsyncError(comm, &state) == ncclSuccess && state == ncclInProgress &&
         std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return state;
}

ncclConfig_t non_blocking() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

// Lazy connection: on a blocking comm, a rank's first collective returns only once every
// peer's first collective has come; its second does not wait on the host.
TEST(EmuNccl, FirstCollectiveWaitsOnTheHostForEveryPeer) {
  std::atomic<bool> rank0_returned{false}, rank1_called{false};
  run_ranks(2, [&](int rank, ncclComm_t comm, cudaStream_t stream) {
    const Dtype& d = dtypes()[7];  // float32
    void* buf = device_input(d, rank, 100, stream);
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      EXPECT_FALSE(rank0_returned.load()) << "rank 0's first collective returned before rank 1 called its own";
      rank1_called = true;
    }
    NCCL_OK(ncclAllReduce(buf, buf, 100, d.type, ncclSum, comm, stream));
    if (rank == 0) {
      EXPECT_TRUE(rank1_called.load());
      rank0_returned = true;
    }
    expect_matches(d, to_host(buf, 100 * d.size, stream), 100, [&](size_t i) { return reference(d, ncclSum, 2, i); },
                   "first ncclAllReduce");
    CUDA_OK(cudaFree(buf));
  });
}

// A non-blocking comm never waits inside a call: init and the first collective return
// ncclInProgress while their peers are missing, the comm says so until they come, and a
// call before then is ncclInvalidUsage; the results are those of blocking comms.
TEST(EmuNccl, NonBlockingCommsNeverWaitInACall) {
  ASSERT_GE(device_count(), 2);
  setenv("EMBER_EMU_NCCL_SLOT_BYTES", std::to_string(kSlotBytes).c_str(), 1);
  ncclUniqueId id;
  NCCL_OK(ncclGetUniqueId(&id));
  const Dtype& d = dtypes()[7];  // float32
  ncclComm_t comms[2] = {nullptr, nullptr};
  cudaStream_t streams[2];
  void* bufs[2];
  auto start_rank = [&](int r) {
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaStreamCreate(&streams[r]));
    bufs[r] = device_input(d, r, kBig, streams[r]);
    ncclConfig_t config = non_blocking();
    ASSERT_EQ(ncclCommInitRankConfig(&comms[r], 2, id, r, &config), ncclInProgress);
  };
  auto state = [](ncclComm_t c) {
    ncclResult_t s = ncclInternalError;
    EXPECT_EQ(ncclCommGetAsyncError(c, &s), ncclSuccess);
    return s;
  };
  start_rank(0);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(state(comms[0]), ncclInProgress) << "init completed without its peer";
  EXPECT_EQ(ncclAllReduce(bufs[0], bufs[0], kBig, d.type, ncclSum, comms[0], streams[0]), ncclInvalidUsage);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("still in progress"), std::string::npos);
  start_rank(1);
  for (int r = 0; r < 2; ++r) ASSERT_EQ(settle(comms[r]), ncclSuccess) << "init of rank " << r;

  CUDA_OK(cudaSetDevice(0));
  ASSERT_EQ(ncclAllReduce(bufs[0], bufs[0], kBig, d.type, ncclSum, comms[0], streams[0]), ncclInProgress);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(state(comms[0]), ncclInProgress) << "the first collective connected without its peer";
  CUDA_OK(cudaSetDevice(1));
  const ncclResult_t second = ncclAllReduce(bufs[1], bufs[1], kBig, d.type, ncclSum, comms[1], streams[1]);
  EXPECT_TRUE(second == ncclInProgress || second == ncclSuccess) << second;
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(settle(comms[r]), ncclSuccess) << "first collective of rank " << r;
    CUDA_OK(cudaSetDevice(r));
    // The second collective finds the ranks connected: queued at once.
    EXPECT_EQ(ncclAllReduce(bufs[r], bufs[r], kBig, d.type, ncclSum, comms[r], streams[r]), ncclSuccess);
  }
  for (int r = 0; r < 2; ++r) {
    CUDA_OK(cudaSetDevice(r));
    expect_matches(d, to_host(bufs[r], kBig * d.size, streams[r]), kBig,
                   [&](size_t i) { return 2 * reference(d, ncclSum, 2, i); }, "rank " + std::to_string(r));
    const ncclResult_t f = ncclCommFinalize(comms[r]);
    EXPECT_TRUE(f == ncclInProgress || f == ncclSuccess) << f;
    EXPECT_EQ(settle(comms[r]), ncclSuccess);
    NCCL_OK(ncclCommDestroy(comms[r]));
    CUDA_OK(cudaFree(bufs[r]));
    CUDA_OK(cudaStreamDestroy(streams[r]));
  }
  EXPECT_FALSE(segment_exists(id));
}

// ncclCommAbort from another thread releases a non-blocking init whose peer never comes
// (leaving nothing in /dev/shm) and a first collective whose peer never calls; the peer's
// own first collective then ends in ncclRemoteError instead of waiting.
TEST(EmuNccl, AbortReleasesANonBlockingInitAndConnection) {
  ASSERT_GE(device_count(), 2);
  using Clock = std::chrono::steady_clock;
  {
    ncclUniqueId id;
    NCCL_OK(ncclGetUniqueId(&id));
    CUDA_OK(cudaSetDevice(0));
    ncclComm_t comm = nullptr;
    ncclConfig_t config = non_blocking();
    ASSERT_EQ(ncclCommInitRankConfig(&comm, 2, id, 0, &config), ncclInProgress);
    EXPECT_EQ(settle(comm, std::chrono::milliseconds(100)), ncclInProgress);
    const auto t0 = Clock::now();
    std::thread([&] { EXPECT_EQ(ncclCommAbort(comm), ncclSuccess); }).join();
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2));
    ncclResult_t async = ncclSuccess;
    NCCL_OK(ncclCommGetAsyncError(comm, &async));
    EXPECT_NE(async, ncclSuccess);
    EXPECT_NE(async, ncclInProgress);
    EXPECT_FALSE(segment_exists(id)) << "an abandoned init left its segment in /dev/shm";
  }
  ncclUniqueId id;
  NCCL_OK(ncclGetUniqueId(&id));
  ncclComm_t comms[2];
  std::vector<std::thread> inits;
  for (int r = 0; r < 2; ++r)
    inits.emplace_back([&, r] {
      CUDA_OK(cudaSetDevice(r));
      ncclConfig_t config = non_blocking();
      ASSERT_EQ(ncclCommInitRankConfig(&comms[r], 2, id, r, &config), ncclInProgress);
      ASSERT_EQ(settle(comms[r]), ncclSuccess);
    });
  for (auto& t : inits) t.join();
  cudaStream_t streams[2];
  float* bufs[2];
  for (int r = 0; r < 2; ++r) {
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaStreamCreate(&streams[r]));
    CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&bufs[r]), 64 * sizeof(float)));
  }
  CUDA_OK(cudaSetDevice(0));
  ASSERT_EQ(ncclAllReduce(bufs[0], bufs[0], 64, ncclFloat32, ncclSum, comms[0], streams[0]), ncclInProgress);
  EXPECT_EQ(settle(comms[0], std::chrono::milliseconds(100)), ncclInProgress);
  const auto t0 = Clock::now();
  std::thread([&] { EXPECT_EQ(ncclCommAbort(comms[0]), ncclSuccess); }).join();
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2));
  ncclResult_t async = ncclSuccess;
  NCCL_OK(ncclCommGetAsyncError(comms[0], &async));
  EXPECT_EQ(async, ncclSystemError);
  CUDA_OK(cudaSetDevice(1));
  const ncclResult_t late = ncclAllReduce(bufs[1], bufs[1], 64, ncclFloat32, ncclSum, comms[1], streams[1]);
  EXPECT_TRUE(late == ncclInProgress || late == ncclRemoteError) << late;
  EXPECT_EQ(settle(comms[1]), ncclRemoteError);
  EXPECT_NE(std::string(ncclGetLastError(comms[1])).find("aborted"), std::string::npos) << ncclGetLastError(comms[1]);
  NCCL_OK(ncclCommAbort(comms[1]));
  for (int r = 0; r < 2; ++r) {
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaStreamSynchronize(streams[r]));
    CUDA_OK(cudaFree(bufs[r]));
    CUDA_OK(cudaStreamDestroy(streams[r]));
  }
}

TEST(EmuNccl, TwoRanksOnOneDeviceAreInvalidUsage) {
  ASSERT_GE(device_count(), 2);
  ncclUniqueId id;
  NCCL_OK(ncclGetUniqueId(&id));
  ncclResult_t results[2];
  std::string messages[2];
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      cudaSetDevice(1);
      ncclComm_t comm = nullptr;
      results[r] = ncclCommInitRank(&comm, 2, id, r);
      messages[r] = ncclGetLastError(nullptr);
      EXPECT_EQ(comm, nullptr);
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(results[r], ncclInvalidUsage);
    EXPECT_NE(messages[r].find("Duplicate GPU detected"), std::string::npos) << messages[r];
  }
  EXPECT_FALSE(segment_exists(id));
}

TEST(EmuNccl, BadArgumentsAreInvalidArgument) {
  ASSERT_GE(device_count(), 2);
  int version = 0;
  NCCL_OK(ncclGetVersion(&version));
  EXPECT_EQ(version, NCCL_VERSION_CODE);
  ncclUniqueId id;
  NCCL_OK(ncclGetUniqueId(&id));
  ncclComm_t comm = nullptr;
  EXPECT_EQ(ncclCommInitRank(&comm, 0, id, 0), ncclInvalidArgument);
  EXPECT_EQ(ncclCommInitRank(&comm, 2, id, 2), ncclInvalidArgument);
  ncclUniqueId junk{};
  EXPECT_EQ(ncclCommInitRank(&comm, 1, junk, 0), ncclInvalidArgument);
  EXPECT_FALSE(std::string(ncclGetLastError(nullptr)).empty());
  CUDA_OK(cudaSetDevice(0));
  NCCL_OK(ncclCommInitRank(&comm, 1, id, 0));
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  float *buf = nullptr, *other = nullptr;
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&buf), 16 * sizeof(float)));
  CUDA_OK(cudaSetDevice(1));
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&other), 16 * sizeof(float)));
  CUDA_OK(cudaSetDevice(0));
  std::vector<float> host(16);
  EXPECT_EQ(ncclAllReduce(host.data(), buf, 16, ncclFloat32, ncclSum, comm, stream), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(comm)).find("sendbuff"), std::string::npos) << ncclGetLastError(comm);
  EXPECT_EQ(ncclAllReduce(buf, other, 16, ncclFloat32, ncclSum, comm, stream), ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(buf, buf, 200, ncclFloat32, ncclSum, comm, stream), ncclInvalidArgument);  // past its end
  EXPECT_EQ(ncclAllReduce(buf, buf, 16, ncclFloat8e4m3, ncclSum, comm, stream), ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(buf, buf, 16, ncclFloat32, static_cast<ncclRedOp_t>(9), comm, stream), ncclInvalidArgument);
  EXPECT_EQ(ncclBroadcast(buf, buf, 16, ncclFloat32, 1, comm, stream), ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(buf, buf, 16, ncclFloat32, ncclSum, nullptr, stream), ncclInvalidArgument);
  EXPECT_EQ(ncclAllGather(buf, buf, 16, ncclFloat32, comm, stream), ncclSuccess);  // world 1: in place
  EXPECT_EQ(ncclAllReduce(nullptr, nullptr, 0, ncclFloat32, ncclSum, comm, stream), ncclSuccess);  // count 0
  CUDA_OK(cudaStreamSynchronize(stream));
  ncclResult_t async = ncclInternalError;
  NCCL_OK(ncclCommGetAsyncError(comm, &async));
  EXPECT_EQ(async, ncclSuccess);
  NCCL_OK(ncclCommDestroy(comm));
  CUDA_OK(cudaFree(buf));
  CUDA_OK(cudaFree(other));
  CUDA_OK(cudaStreamDestroy(stream));
  EXPECT_STREQ(ncclGetErrorString(ncclInvalidUsage), "invalid usage (run with NCCL_DEBUG=WARN for details)");
}
}  // namespace

#endif  // EMBER_CUDA_EMULATED
