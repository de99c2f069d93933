// Input files: only regular files, and small ones read whole but never past
// their limit.
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "expect_error.h"
#include "tessera/input_file.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

TEST(InputFile, ReadsAWholeFile) {
    const fs::path p = fs::temp_directory_path() / ("tessera_input_" + std::to_string(::getpid()));
    std::ofstream(p) << "{\"levels\": []}";
    EXPECT_EQ(read_input_file(p.string(), "the machine description", 100), "{\"levels\": []}");
    test::expect_error([&] { read_input_file(p.string(), "the machine description", 4); },
                       "the machine description '" + p.string() + "' is larger than 4 B");
    fs::remove(p);
}

// Only regular files are read: /dev/zero would never end, and opening a FIFO
// that no one writes would block forever (and, under a signal handler, swallow
// the first SIGTERM). Each is refused at once, naming what it is.
TEST(InputFile, DevicesAndFifosAreRefused) {
    test::expect_error([] { read_input_file("/dev/zero", "the machine description", kMaxMachineFileBytes); },
                       "cannot read the machine description '/dev/zero': it is a device, not a regular file");
    const fs::path fifo = fs::temp_directory_path() / ("tessera_fifo_" + std::to_string(::getpid()));
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    test::expect_error([&] { read_input_file(fifo.string(), "the --plan file", kMaxJsonFileBytes); },
                       "cannot read the --plan file '" + fifo.string() + "': it is a FIFO, not a regular file");
    test::expect_error([&] { ::close(open_regular_file(fifo.string(), "the safetensors file")); },
                       "it is a FIFO, not a regular file");
    test::expect_error([&] { check_regular_file(fifo.string(), "the ONNX model"); },
                       "cannot read the ONNX model '" + fifo.string() + "': it is a FIFO, not a regular file");
    fs::remove(fifo);
}

TEST(InputFile, MissingFilesAndDirectoriesAreNamed) {
    test::expect_error([] { read_input_file("/nonexistent/m.json", "the machine description", 100); },
                       "cannot read the machine description '/nonexistent/m.json': No such file or directory");
    test::expect_error([] { read_input_file("/", "the --plan file", 100); },
                       "cannot read the --plan file '/': it is a directory");
}

}  // namespace
}  // namespace tessera
