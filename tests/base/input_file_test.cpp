// Small input files: read whole, but never past their limit.
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
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

// /dev/zero never ends: the limit ends it, naming the file and the limit.
TEST(InputFile, AnEndlessFileStopsAtTheLimit) {
    test::expect_error([] { read_input_file("/dev/zero", "the machine description", kMaxMachineFileBytes); },
                       "the machine description '/dev/zero' is larger than 1.00 MiB");
}

TEST(InputFile, MissingFilesAndDirectoriesAreNamed) {
    test::expect_error([] { read_input_file("/nonexistent/m.json", "the machine description", 100); },
                       "cannot read the machine description '/nonexistent/m.json': No such file or directory");
    test::expect_error([] { read_input_file("/", "the --plan file", 100); },
                       "cannot read the --plan file '/': it is a directory");
}

}  // namespace
}  // namespace tessera
