// Writing a file so that a crash never leaves it half-written: the bytes go to a
// temporary file beside it, which is flushed to disk (fsync) and renamed over the path.
// Until commit() the old file, if any, is untouched; a writer destroyed without commit()
// removes its temporary file.
#pragma once

#include <cstddef>
#include <string>

namespace ember {

class AtomicFile {
 public:
  // `what` names the caller in error messages ("save_safetensors").
  AtomicFile(std::string path, std::string what);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, std::size_t n);
  void write(const std::string& s) { write(s.data(), s.size()); }
  // fsync, close, rename over the path. Throws ember::Error (the old file stays).
  void commit();

 private:
  [[noreturn]] void fail(const char* doing);
  std::string path_, tmp_, what_;
  int fd_ = -1;
};

// Throws ember::Error naming `path` and the OS error unless a file can be created beside
// it: creates and removes a uniquely named temporary file in its directory, never
// touching `path` itself. For callers that write at the end of a long run (a training
// checkpoint) and should fail at its start instead.
void check_can_write(const std::string& path, const std::string& what);

// The whole of `contents` to `path`, atomically.
void write_file_atomically(const std::string& path, const std::string& contents, const std::string& what);

}  // namespace ember
