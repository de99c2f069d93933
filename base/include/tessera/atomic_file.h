// Output files that appear whole or not at all. A file is written under a
// temporary name in its own directory (".NAME.tmp.PID.N", so that the rename
// stays inside one file system), flushed with fsync, and renamed over the
// destination; the directory is then fsynced so the rename survives a crash.
// Any failure, or an exception before commit(), removes the temporary file
// and leaves the destination as it was. Every output file of Tessera
// (checkpoints, plans, graphs, reports) is written this way.
#pragma once

#include <cstddef>
#include <string>

namespace tessera {

class AtomicFile {
public:
    // Creates the temporary file next to `path`. `what` names the file in
    // errors ("safetensors file", "graph file"; may be empty): tessera::Error
    // "cannot write WHAT 'PATH': ..." with the call that failed and why.
    AtomicFile(std::string path, std::string what);
    ~AtomicFile();  // removes the temporary file unless committed
    AtomicFile(const AtomicFile &) = delete;
    AtomicFile &operator=(const AtomicFile &) = delete;

    void write(const void *data, size_t n);
    void write(const std::string &text) { write(text.data(), text.size()); }
    // fsync, close, rename over the destination, fsync the directory.
    void commit();

private:
    [[noreturn]] void failed(const char *call) const;

    std::string dest_, what_, path_;
    int fd_ = -1;
    bool committed_ = false;
};

// Writes `contents` to `path` through an AtomicFile.
void write_file_atomically(const std::string &path, const std::string &contents, const std::string &what);

// The prefix of the temporary files an AtomicFile for `path` creates
// (".NAME.tmp."), for a clean-up of those a killed process left behind.
std::string atomic_temp_prefix(const std::string &path);

}  // namespace tessera
