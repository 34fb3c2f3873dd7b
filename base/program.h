// How an ember program ends on an error: one line on stderr naming the program, and an
// exit status below 128, never an uncaught exception (std::terminate, SIGABRT, status 134).
// Every program under examples/ and tools/ runs its main through run_program.
//
// Note [Errors leave programs on one line]. The body's ember::Error is printed as
// "PROGRAM: error: MESSAGE" with exit status 1 (an OutOfMemoryError's message is its
// report: a first line, then the figures). What ember does not raise itself, but the
// standard library does beneath it (std::bad_alloc, std::system_error from a thread that
// cannot start, std::filesystem_error), is printed the same way with its kind named, and
// is a bug to fix at its site with an error of its own. An exception that escapes where
// nothing can catch it (another thread, a destructor) reaches the terminate handler,
// which prints it on one line and exits with status 70 (EX_SOFTWARE). A command-line
// error is CLI11's (exit status 100 to 127): cli_failure_message puts it on one line.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <exception>
#include <filesystem>
#include <new>
#include <string>
#include <system_error>
#include <utility>

#include "base/error.h"

namespace ember {

namespace detail {

inline const char*& program_name() {
  static const char* name = "ember";
  return name;
}

// The message of an exception, with its kind when it is not ember's own.
inline std::string describe(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const Error& x) {
    return x.what();
  } catch (const std::bad_alloc&) {
    return "out of host memory (std::bad_alloc)";
  } catch (const std::filesystem::filesystem_error& x) {
    return std::string(x.what()) + " (std::filesystem_error)";
  } catch (const std::system_error& x) {
    return std::string(x.what()) + " (std::system_error)";
  } catch (const std::exception& x) {
    return std::string(x.what()) + " (std::exception)";
  } catch (...) {
    return "an exception of unknown type";
  }
}

[[noreturn]] inline void on_terminate() {
  const std::exception_ptr e = std::current_exception();
  const std::string what = e ? describe(e) : "std::terminate called without an exception";
  std::fflush(stdout);
  std::fprintf(stderr, "%s: internal error: %s\n", program_name(), what.c_str());
  std::fflush(stderr);
  ::_exit(70);
}

}  // namespace detail

// Runs `body` (returning the exit status) under Note [Errors leave programs on one line].
template <class Body>
int run_program(const char* name, Body&& body) noexcept {
  detail::program_name() = name;
  std::set_terminate(detail::on_terminate);
  try {
    return std::forward<Body>(body)();
  } catch (...) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: error: %s\n", name, detail::describe(std::current_exception()).c_str());
    return 1;
  }
}

// For CLI11's App::failure_message: a bad flag on one line, e.g.
// "ember_mlp: --threads: Value 1000 not in range 1 to 2 (--help lists the flags)".
// Generic, so that this header needs no CLI11.
inline constexpr auto cli_failure_message = [](const auto* /*app*/, const auto& e) {
  return std::string(detail::program_name()) + ": " + e.what() + " (--help lists the flags)\n";
};

}  // namespace ember
