// AtomicFile: the destination appears whole or not at all, and no temporary
// file is left behind by a failure.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <gtest/gtest.h>
#include <sys/stat.h>
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
                       "cannot write '" + file("taken") + "': it is a directory");
    EXPECT_EQ(entries(), 1u);  // only "taken": no temporary file left
}

// A link is written through: the file it points to is replaced, the link
// stays, and a dangling link's target is created. A link to a link too.
TEST_F(AtomicFileTest, ASymbolicLinkIsWrittenThrough) {
    write_file_atomically(file("real.txt"), "old", "");
    fs::create_symlink("real.txt", dir_ / "link");
    fs::create_symlink(dir_ / "link", dir_ / "link2");
    write_file_atomically(file("link2"), "new", "");
    EXPECT_TRUE(fs::is_symlink(dir_ / "link2"));
    EXPECT_TRUE(fs::is_symlink(dir_ / "link"));
    EXPECT_EQ(read(file("real.txt")), "new");
    fs::create_symlink("absent.txt", dir_ / "dangling");
    write_file_atomically(file("dangling"), "made", "");
    EXPECT_TRUE(fs::is_symlink(dir_ / "dangling"));
    EXPECT_EQ(read(file("absent.txt")), "made");
    EXPECT_EQ(entries(), 5u);  // no temporary file left
}

// A replaced file keeps its permissions.
TEST_F(AtomicFileTest, AReplacedFileKeepsItsPermissions) {
    write_file_atomically(file("a.sh"), "old", "");
    fs::permissions(file("a.sh"), fs::perms::owner_all | fs::perms::group_read);
    write_file_atomically(file("a.sh"), "new", "");
    EXPECT_EQ(fs::status(file("a.sh")).permissions(), fs::perms::owner_all | fs::perms::group_read);
}

// A FIFO (or a device) is written directly, as a shell redirection would:
// renaming over it would leave a plain file in its place.
TEST_F(AtomicFileTest, AFifoIsWrittenDirectlyAndStaysAFifo) {
    ASSERT_EQ(::mkfifo(file("fifo").c_str(), 0600), 0);
    std::string got;
    std::thread reader([&] { got = read(file("fifo")); });
    write_file_atomically(file("fifo"), "through the pipe", "");
    reader.join();
    EXPECT_EQ(got, "through the pipe");
    EXPECT_TRUE(fs::is_fifo(file("fifo")));
    EXPECT_EQ(entries(), 1u);
}

// Devices, reached through links in the test's own directory (so that a
// broken AtomicFile replaces only the link, never the device): /dev/null
// takes the bytes and stays a device; /dev/full's error is reported.
TEST_F(AtomicFileTest, DevicesAreWrittenDirectlyAndTheirErrorsReported) {
    fs::create_symlink("/dev/null", dir_ / "null");
    write_file_atomically(file("null"), "gone", "");
    EXPECT_TRUE(fs::is_symlink(dir_ / "null"));
    EXPECT_TRUE(fs::is_character_file("/dev/null"));
    if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
    fs::create_symlink("/dev/full", dir_ / "full");
    test::expect_error([&] { write_file_atomically(file("full"), "x", "test file"); },
                       "cannot write test file '" + file("full") + "': write failed: No space left on device");
    EXPECT_TRUE(fs::is_symlink(dir_ / "full"));
    EXPECT_EQ(entries(), 2u);
}

TEST_F(AtomicFileTest, TemporaryFilesAreHiddenBesideTheDestination) {
    EXPECT_EQ(atomic_temp_prefix(file("checkpoint.safetensors")), ".checkpoint.safetensors.tmp.");
}

}  // namespace
}  // namespace tessera
