// What the example tests share: running a program through the shell and reading its
// output's last line (the --json line).
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <utility>

namespace ember::test {

// stdout (and whatever the command redirects into it) of `cmd`, and its exit status.
inline std::pair<std::string, int> run(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  return {out, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

inline std::string last_line(const std::string& s) {
  const size_t end = s.find_last_not_of('\n');
  if (end == std::string::npos) return {};
  const size_t start = s.rfind('\n', end);
  const size_t from = start == std::string::npos ? 0 : start + 1;
  return s.substr(from, end - from + 1);
}

}  // namespace ember::test
