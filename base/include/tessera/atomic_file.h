// Output files that appear whole or not at all. A file is written under a
// temporary name in its own directory (".NAME.tmp.PID.N", so that the rename
// stays inside one file system), flushed with fsync, and renamed over the
// destination; the directory is then fsynced so the rename survives a crash.
// Any failure, or an exception before commit(), removes the temporary file
// and leaves the destination as it was. Every output file of Tessera
// (checkpoints, plans, graphs, reports) is written this way.
//
// Only a regular file (or a missing path) is replaced. A symbolic link is
// followed, and the file it points to is replaced, so the link stays. A
// destination that is not a regular file (a character device such as
// /dev/null or /dev/stdout's terminal, a FIFO) is written directly, as a shell
// redirection would: renaming over it would put a plain file in its place.
// Every write is checked, so /dev/full fails with "No space left on device".
#pragma once

#include <cstddef>
#include <string>

namespace tessera {

class AtomicFile {
public:
    // Creates the temporary file next to `path` (next to the file a link at
    // `path` points to), or opens a destination that is not a regular file.
    // `what` names the file in errors ("safetensors file", "graph file"; may
    // be empty): tessera::Error "cannot write WHAT 'PATH': ..." with the call
    // that failed and why; a directory is refused.
    AtomicFile(std::string path, std::string what);
    ~AtomicFile();  // removes the temporary file unless committed
    AtomicFile(const AtomicFile &) = delete;
    AtomicFile &operator=(const AtomicFile &) = delete;

    void write(const void *data, size_t n);
    void write(const std::string &text) { write(text.data(), text.size()); }
    // fsync, close, rename over the destination, fsync the directory; for a
    // destination written directly, close only.
    void commit();

private:
    void create_temporary(const std::string &target);
    [[noreturn]] void failed(const char *call) const;

    std::string dest_, what_;
    std::string target_;  // the path finally written: dest_ with its symbolic links followed
    std::string path_;    // the temporary file; empty when writing the target directly
    int fd_ = -1;
    bool committed_ = false;
};

// Writes `contents` to `path` through an AtomicFile.
void write_file_atomically(const std::string &path, const std::string &contents, const std::string &what);

// A program's output: to `path` through an AtomicFile, or with an empty path
// to standard output, flushed and checked (flush_stdout).
void write_output(const std::string &path, const std::string &contents);

// Flushes std::cout and throws tessera::Error "cannot write to standard
// output: REASON" if any write to it failed (a full disk, /dev/full), so
// that a program does not exit 0 having lost its output. The reason is
// known when this flush fails; an earlier failed write left no errno.
void flush_stdout();

// The prefix of the temporary files an AtomicFile for `path` creates
// (".NAME.tmp."), for a clean-up of those a killed process left behind.
std::string atomic_temp_prefix(const std::string &path);

}  // namespace tessera
