// Helpers for comm tests: run N ranks as threads of this process over one InProcessStore.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/process_group.h"
#include "comm/store.h"
#include "core/runtime.h"

namespace ember::comm::testing {

// Runs fn(pg) on `n` threads, one per rank, each with its own ProcessGroup; rethrows the
// first rank's exception (prefixed with its rank) after all threads have ended.
inline void run_ranks(int n, const std::function<void(ProcessGroup&)>& fn, const ProcessGroupOptions& options) {
  auto store = std::make_shared<InProcessStore>();
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(n);
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      SingleThreadedScope single;  // ranks are threads: keep each on its own core's worth
      try {
        ProcessGroup pg(store, r, n, options);
        fn(pg);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r)
    if (errors[r]) {
      try {
        std::rethrow_exception(errors[r]);
      } catch (const std::exception& e) {
        throw std::runtime_error("rank " + std::to_string(r) + ": " + e.what());
      }
    }
}

inline void run_ranks(int n, const std::function<void(ProcessGroup&)>& fn,
                      Duration timeout = std::chrono::seconds(20)) {
  run_ranks(n, fn, ProcessGroupOptions{.timeout = timeout});
}

}  // namespace ember::comm::testing
