// Writing the file a path names so that a crash at any instant leaves the old or the new
// complete file there and nothing else (Note [Atomic file writes] in atomic_file.cpp):
// symlinks are followed to the file they name, whose mode and owner the new file keeps;
// anything that is not a regular file (a directory, a device, a FIFO, a socket) is refused;
// the bytes go to an unnamed temporary file beside the target, which is flushed to disk
// (fsync), named and renamed over the target, and the folder is flushed too. Until
// commit() the old file is untouched; a writer destroyed without commit() leaves nothing.
// Checkpoints, safetensors files, memory snapshots and ember-memviz's SVGs are written so.
// read_file is the reading side: whole regular files only.
#pragma once

#include <cstddef>
#include <string>

namespace ember {

class AtomicFile {
 public:
  // `what` names the caller in error messages ("save_safetensors", "--save").
  AtomicFile(std::string path, std::string what);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, std::size_t n);
  void write(const std::string& s) { write(s.data(), s.size()); }
  // fsync, name, rename over the target, fsync the folder. Throws ember::Error (the old
  // file stays).
  void commit();
  // The file written: the path with its symlinks followed.
  const std::string& target() const { return target_; }

 private:
  [[noreturn]] void fail(const std::string& doing);
  void keep_mode_and_owner(const void* old_stat);
  std::string path_, what_, target_, tmp_;  // tmp_: the temporary's name, once it has one
  int fd_ = -1;
};

// The file `path` names for writing: its symlinks followed, chains too, to their end (which
// need not exist yet). Throws ember::Error naming `what` and the path when the links loop,
// or when what they end at exists and is not a regular file.
std::string resolve_write_target(const std::string& path, const std::string& what);

// Throws ember::Error naming `path` and the reason unless the file it names can be written
// as AtomicFile writes it: resolves it, checks its kind, and opens (and drops) an unnamed
// file in its folder, never touching `path` itself. For callers that write at the end of a
// long run (a training checkpoint) and should fail at its start instead.
void check_can_write(const std::string& path, const std::string& what);

// The whole of `contents` to `path`, atomically.
void write_file_atomically(const std::string& path, const std::string& contents, const std::string& what);

// The whole of the regular file at `path` (symlinks followed). A directory, a FIFO (which
// would block), a device or a file that cannot be read is an ember::Error naming `what`
// and the path.
std::string read_file(const std::string& path, const std::string& what);

namespace detail {
// Tests only: named temporary files from the start, as on a filesystem without O_TMPFILE.
void set_unnamed_temp_files(bool enabled);
}  // namespace detail

}  // namespace ember
