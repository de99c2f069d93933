// AtomicFile: the destination appears whole or not at all, and no temporary
// file is left behind by a failure.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <gtest/gtest.h>
#include <unistd.h>

#include "expect_error.h"
#include "tessera/atomic_file.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

class AtomicFileTest : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("tessera_atomic_" + std::to_string(::getpid()));
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string file(const std::string &name) const { return (dir_ / name).string(); }
    static std::string read(const std::string &path) {
        std::ifstream f(path);
        std::stringstream s;
        s << f.rdbuf();
        return s.str();
    }
    size_t entries() const { return std::distance(fs::directory_iterator(dir_), fs::directory_iterator()); }

    fs::path dir_;
};

TEST_F(AtomicFileTest, WritesAndReplaces) {
    write_file_atomically(file("a.txt"), "first\n", "test file");
    EXPECT_EQ(read(file("a.txt")), "first\n");
    write_file_atomically(file("a.txt"), "second\n", "test file");
    EXPECT_EQ(read(file("a.txt")), "second\n");
    EXPECT_EQ(entries(), 1u);
}

TEST_F(AtomicFileTest, AnExceptionBeforeCommitLeavesTheOldFile) {
    write_file_atomically(file("a.txt"), "old", "test file");
    try {
        AtomicFile f(file("a.txt"), "test file");
        f.write("new, half written");
        EXPECT_EQ(entries(), 2u);  // the destination and the temporary file
        throw std::runtime_error("stop");
    } catch (const std::runtime_error &) {
    }
    EXPECT_EQ(read(file("a.txt")), "old");
    EXPECT_EQ(entries(), 1u);
}

TEST_F(AtomicFileTest, ErrorsNameTheFileAndTheCause) {
    test::expect_error([&] { write_file_atomically(file("no/such/dir/a.txt"), "x", "test file"); },
                       "cannot write test file '" + file("no/such/dir/a.txt") +
                           "': cannot create a file in '" + file("no/such/dir") + "': No such file or directory");
    fs::create_directories(dir_ / "taken");
    test::expect_error([&] { write_file_atomically(file("taken"), "x", ""); },
                       "cannot write '" + file("taken") + "': rename failed");
    EXPECT_EQ(entries(), 1u);  // only "taken": no temporary file left
}

TEST_F(AtomicFileTest, TemporaryFilesAreHiddenBesideTheDestination) {
    EXPECT_EQ(atomic_temp_prefix(file("checkpoint.safetensors")), ".checkpoint.safetensors.tmp.");
}

}  // namespace
}  // namespace tessera
