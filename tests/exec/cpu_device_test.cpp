// The CPU device: arena, streams, events, errors and counters; and the size
// flags that configure it.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <latch>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "expect_error.h"
#include "tessera/error.h"
#include "tessera/exec/cpu_device.h"
#include "tessera/size.h"

namespace tessera {
namespace {

using namespace std::chrono_literals;

using test::error_of;

// ---- parse_size / format_bytes ----

TEST(ParseSize, AcceptsBinaryDecimalAndPlainUnits) {
    EXPECT_EQ(parse_size("512MiB", "--device-mem"), 512LL << 20);
    EXPECT_EQ(parse_size("2GiB", "--device-mem"), 2LL << 30);
    EXPECT_EQ(parse_size("1.5GB", "--device-mem"), 1500000000LL);
    EXPECT_EQ(parse_size("64KiB", "--device-mem"), 65536);
    EXPECT_EQ(parse_size("1048576", "--device-mem"), 1048576);
    EXPECT_EQ(parse_size("100MB", "--device-mem"), 100000000);
    EXPECT_EQ(parse_size("3TiB", "x"), 3LL << 40);
    EXPECT_EQ(parse_size("2TB", "x"), 2000000000000LL);
    EXPECT_EQ(parse_size("7B", "x"), 7);
    EXPECT_EQ(parse_size("1.5KiB", "x"), 1536);
    EXPECT_EQ(parse_size(".5KiB", "x"), 512);
}

TEST(ParseSize, UnitsAreCaseInsensitiveAndTheBIsOptional) {
    EXPECT_EQ(parse_size("512mib", "x"), 512LL << 20);
    EXPECT_EQ(parse_size("512Mi", "x"), 512LL << 20);
    EXPECT_EQ(parse_size("2gib", "x"), 2LL << 30);
    EXPECT_EQ(parse_size("2G", "x"), 2000000000LL);
    EXPECT_EQ(parse_size("100mb", "x"), 100000000);
    EXPECT_EQ(parse_size("4k", "x"), 4000);
    EXPECT_EQ(parse_size(" 16MiB ", "x"), 16LL << 20);
    EXPECT_EQ(parse_size("16 MiB", "x"), 16LL << 20);
}

TEST(ParseSize, FractionsRoundToTheNearestByte) {
    EXPECT_EQ(parse_size("0.1KB", "x"), 100);
    EXPECT_EQ(parse_size("1.0001KiB", "x"), 1024);  // 1024.1024 -> 1024
    EXPECT_EQ(parse_size("0.0009765625MiB", "x"), 1024);
    EXPECT_EQ(parse_size("8.3B", "x"), 8);
}

TEST(ParseSize, BadTextNamesTheFlagAndShowsExamples) {
    EXPECT_EQ(error_of<Error>([] { parse_size("12XB", "--device-mem"); }),
              "--device-mem: '12XB' is not a size; use e.g. 512MiB or 2GiB (units: B, KiB, MiB, GiB, TiB are "
              "powers of 1024; KB, MB, GB, TB powers of 1000)");
    for (const char *bad : {"", "MiB", "abc", "1.2.3GB", "1e9", "12 MiB extra", "0x10", "KiB5", "5 iB"})
        EXPECT_NE(error_of<Error>([&] { parse_size(bad, "--host-mem"); }).find("--host-mem: '"), std::string::npos)
            << bad;
}

TEST(ParseSize, RejectsNegativeZeroAndOverflow) {
    EXPECT_EQ(error_of<Error>([] { parse_size("-5MiB", "--device-mem"); }),
              "--device-mem: '-5MiB' is negative; a size must be positive, use e.g. 512MiB or 2GiB");
    EXPECT_EQ(error_of<Error>([] { parse_size("0", "--device-mem"); }),
              "--device-mem: '0' is zero bytes; a size must be positive, use e.g. 512MiB or 2GiB");
    EXPECT_NE(error_of<Error>([] { parse_size("0.4B", "x"); }).find("is zero bytes"), std::string::npos);
    EXPECT_NE(error_of<Error>([] { parse_size("8EB", "--device-mem"); }).find("'8EB' is not a size"),
              std::string::npos);
    EXPECT_NE(error_of<Error>([] { parse_size("9999999TiB", "--device-mem"); }).find("'9999999TiB' is too large"),
              std::string::npos);
    EXPECT_NE(error_of<Error>([] { parse_size("99999999999999999999", "x"); }).find("too large"), std::string::npos);
    EXPECT_EQ(parse_size("9223372036854775807", "x"), INT64_MAX);
    EXPECT_NE(error_of<Error>([] { parse_size("9223372036854775808", "x"); }).find("too large"), std::string::npos);
}

TEST(FormatBytes, UsesBinaryUnitsWithTwoDecimals) {
    EXPECT_EQ(format_bytes(0), "0 B");
    EXPECT_EQ(format_bytes(512), "512 B");
    EXPECT_EQ(format_bytes(1536), "1.50 KiB");
    EXPECT_EQ(format_bytes(3 << 19), "1.50 MiB");
    EXPECT_EQ(format_bytes(12345678), "11.8 MiB");
    EXPECT_EQ(format_bytes(2LL << 30), "2.00 GiB");
    EXPECT_EQ(format_bytes(5LL << 40), "5.00 TiB");
}

TEST(SizeFlag, IsTheSmallestRoundSizeThatParsesBackAtLeastAsLarge) {
    EXPECT_EQ(size_flag_at_least(12345678), "12MiB");
    EXPECT_EQ(size_flag_at_least(1 << 20), "1024KiB");
    EXPECT_EQ(size_flag_at_least((1 << 20) + 1), "2MiB");
    EXPECT_EQ(size_flag_at_least(100), "100B");
    EXPECT_EQ(size_flag_at_least(20LL << 30), "20.0GiB");
    uint64_t x = 12345;
    for (int i = 0; i < 2000; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        int64_t b = static_cast<int64_t>(x >> (20 + i % 40)) + 1;
        std::string flag = size_flag_at_least(b);
        int64_t back = parse_size(flag, "x");
        EXPECT_GE(back, b) << flag;
        EXPECT_LE(back, 2 * b) << flag;  // and not much larger
    }
}

// ---- the arena ----

TEST(CpuDevice, OneAlignedArenaOfExactlyTheRequestedSize) {
    CpuDevice dev(1000003);
    EXPECT_EQ(dev.arena_bytes(), 1000003);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(dev.arena()) % 64, 0u);
    EXPECT_EQ(dev.name(), "cpu");
    dev.arena()[0] = std::byte{1};
    dev.arena()[1000002] = std::byte{2};  // the last byte is ours (ASan checks this)
    EXPECT_EQ(dev.arena()[1000002], std::byte{2});
}

TEST(CpuDevice, ArenaThatCannotBeAllocatedIsAClearError) {
    std::string msg = error_of<Error>([] { CpuDevice dev(int64_t{1} << 62); });
    EXPECT_EQ(msg, "cannot allocate the CPU device arena of 4611686018427387904 bytes (4.00 EiB): the host does "
                   "not have that much memory available; use a smaller --device-mem");
    EXPECT_EQ(error_of<Error>([] { CpuDevice dev(0); }),
              "the CPU device arena must have a positive size, got 0 bytes; use e.g. --device-mem 512MiB");
}

TEST(CpuDevice, CopiesAreBoundsCheckedAndCountedInTheHighWaterMark) {
    CpuDevice dev(4096);
    std::vector<float> v = {1, 2, 3, 4}, back(4);
    dev.copy_to_device(dev.arena() + 1024, v.data(), 16);
    EXPECT_EQ(dev.counters().arena_high_water, 1040);
    dev.copy_to_host(back.data(), dev.arena() + 1024, 16);
    EXPECT_EQ(back, v);
    std::string msg = error_of<Error>([&] { dev.copy_to_device(dev.arena() + 4090, v.data(), 16); });
    EXPECT_NE(msg.find("copy_to_device: 16 bytes at address"), std::string::npos) << msg;
    EXPECT_NE(msg.find("are not inside the cpu arena"), std::string::npos) << msg;
    std::vector<std::byte> host(8);
    EXPECT_NE(error_of<Error>([&] { dev.copy_to_host(back.data(), host.data(), 4); }).find("copy_to_host"),
              std::string::npos);
}

TEST(CpuDevice, AsyncCopiesRunInStreamOrderBetweenTheArenaAndPinnedMemory) {
    CpuDevice dev(4096);
    PinnedBuffer host = dev.allocate_host(256);
    ASSERT_EQ(host.size(), 256u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(host.data()) % 64, 0u);
    // Swap out what a kernel on the same stream writes, then swap it back in
    // elsewhere: stream order alone makes both copies see the right bytes.
    Stream &out = dev.stream(StreamKind::SwapOut);
    out.enqueue([&] {
        std::this_thread::sleep_for(20ms);
        for (int i = 0; i < 256; i++) dev.arena()[i] = std::byte(i);
    });
    dev.copy_async(StreamKind::SwapOut, host.data(), dev.arena(), 256, CopyDirection::DeviceToHost);
    auto e = dev.create_event();
    out.record(*e);
    dev.stream(StreamKind::SwapIn).wait(*e);
    dev.copy_async(StreamKind::SwapIn, dev.arena() + 1024, host.data(), 256, CopyDirection::HostToDevice);
    dev.synchronize();
    for (int i = 0; i < 256; i++) ASSERT_EQ(dev.arena()[1024 + i], std::byte(i)) << i;
    EXPECT_EQ(dev.counters().arena_high_water, 1280);
    std::string msg = error_of<Error>(
        [&] { dev.copy_async(StreamKind::SwapIn, dev.arena() + 4000, host.data(), 256, CopyDirection::HostToDevice); });
    EXPECT_NE(msg.find("copy_async to the device: 256 bytes at address"), std::string::npos) << msg;
    PinnedBuffer moved = std::move(host);
    EXPECT_EQ(host.data(), nullptr);
    EXPECT_EQ(moved.size(), 256u);
}

TEST(CpuDevice, HostMemoryThatCannotBeAllocatedIsAClearError) {
    CpuDevice dev(64);
    EXPECT_EQ(error_of<Error>([&] { dev.allocate_host(size_t{1} << 62); }),
              "cannot allocate 4611686018427387904 bytes (4.00 EiB) of host memory for the cpu device's copies; the "
              "host does not have that much free");
}

// ---- streams and events ----

TEST(CpuStream, RunsItsWorkInOrderOnItsOwnThread) {
    CpuDevice dev(64);
    std::vector<int> seen;
    std::thread::id worker;
    for (int i = 0; i < 1000; i++)
        dev.stream(StreamKind::Compute).enqueue([&, i] {
            seen.push_back(i);
            worker = std::this_thread::get_id();
        });
    dev.stream(StreamKind::Compute).synchronize();
    ASSERT_EQ(seen.size(), 1000u);
    for (int i = 0; i < 1000; i++) EXPECT_EQ(seen[i], i);
    EXPECT_NE(worker, std::this_thread::get_id());
    for (int k = 0; k < kNumStreams; k++) EXPECT_EQ(dev.stream(static_cast<StreamKind>(k)).kind(), StreamKind(k));
}

TEST(CpuStream, StreamsRunConcurrently) {
    // Each stream's task waits, for a bounded time, until all of them are in
    // flight at once: only possible if the streams really run in parallel. Run
    // one after another, each task gives up after the wait and the test fails
    // (instead of deadlocking).
    CpuDevice dev(64);
    std::mutex m;
    std::condition_variable cv;
    int in_flight = 0, most_in_flight = 0;
    std::vector<int> saw_all(kNumStreams, 0);
    for (int k = 0; k < kNumStreams; k++) dev.stream(static_cast<StreamKind>(k)).enqueue([&, k] {
        std::unique_lock<std::mutex> lock(m);
        most_in_flight = std::max(most_in_flight, ++in_flight);
        cv.notify_all();
        saw_all[k] = cv.wait_for(lock, std::chrono::seconds(5), [&] { return most_in_flight == kNumStreams; });
        in_flight--;
    });
    dev.synchronize();
    EXPECT_EQ(most_in_flight, kNumStreams);
    EXPECT_EQ(saw_all, std::vector<int>(kNumStreams, 1));
}

// The race an event prevents. The writer is held by a gate; without an event
// the reader runs (and finishes) while the write has not happened, which this
// test observes deterministically. With the event the reader cannot start
// until the gate opens and the write is done.
TEST(CpuEvent, WithoutAnEventTheReaderRacesAhead) {
    CpuDevice dev(64);
    std::latch gate(1);
    int x = 0, seen = -1;
    dev.stream(StreamKind::SwapIn).enqueue([&] {
        gate.wait();
        x = 1;
    });
    dev.stream(StreamKind::Compute).enqueue([&] { seen = x; });
    dev.stream(StreamKind::Compute).synchronize();  // returns while the writer is still held
    EXPECT_EQ(seen, 0);
    gate.count_down();
    dev.synchronize();
    EXPECT_EQ(x, 1);
}

TEST(CpuEvent, WaitOrdersTheReaderAfterTheRecordedWrite) {
    CpuDevice dev(64);
    std::latch gate(1);
    int x = 0, seen = -1;
    std::atomic<bool> read{false};
    auto e = dev.create_event();
    dev.stream(StreamKind::SwapIn).enqueue([&] {
        gate.wait();
        x = 1;
    });
    dev.stream(StreamKind::SwapIn).record(*e);
    dev.stream(StreamKind::Compute).wait(*e);
    dev.stream(StreamKind::Compute).enqueue([&] {
        seen = x;
        read = true;
    });
    std::this_thread::sleep_for(50ms);
    EXPECT_FALSE(read.load());
    EXPECT_FALSE(e->query());
    gate.count_down();
    e->synchronize();
    EXPECT_TRUE(e->query());
    dev.synchronize();
    EXPECT_EQ(seen, 1);
}

TEST(CpuEvent, WaitingOnAnUnrecordedEventDoesNothing) {
    CpuDevice dev(64);
    auto e = dev.create_event();
    EXPECT_TRUE(e->query());
    bool ran = false;
    dev.stream(StreamKind::Compute).wait(*e);
    dev.stream(StreamKind::Compute).enqueue([&] { ran = true; });
    dev.stream(StreamKind::Compute).synchronize();
    EXPECT_TRUE(ran);
}

TEST(CpuEvent, AWaitRefersToTheMostRecentRecord) {
    CpuDevice dev(64);
    auto e = dev.create_event();
    Stream &a = dev.stream(StreamKind::Comm), &b = dev.stream(StreamKind::Compute);
    a.record(*e);
    a.synchronize();  // the first record has completed
    std::latch gate(1);
    std::atomic<int> stage{0};
    a.enqueue([&] {
        gate.wait();
        stage = 1;
    });
    a.record(*e);  // the wait below refers to this one
    b.wait(*e);
    int seen = -1;
    b.enqueue([&] { seen = stage.load(); });
    std::this_thread::sleep_for(30ms);
    EXPECT_EQ(seen, -1);
    gate.count_down();
    dev.synchronize();
    EXPECT_EQ(seen, 1);
}

// ---- errors ----

TEST(CpuStream, AnErrorIsRethrownBySynchronizeNamingTheStream) {
    CpuDevice dev(64);
    bool later_ran = false;
    dev.stream(StreamKind::Compute).enqueue([] { fail("matmul 'fc1': boom"); });
    dev.stream(StreamKind::Compute).enqueue([&] { later_ran = true; });
    EXPECT_EQ(error_of<Error>([&] { dev.stream(StreamKind::Compute).synchronize(); }),
              "on the compute stream: matmul 'fc1': boom");
    EXPECT_FALSE(later_ran);  // work after a failure is skipped
    // The error is reported once; the stream then works again.
    dev.stream(StreamKind::Compute).enqueue([&] { later_ran = true; });
    dev.stream(StreamKind::Compute).synchronize();
    EXPECT_TRUE(later_ran);
}

TEST(CpuDevice, SynchronizeRethrowsAStreamErrorAndDrainsTheOthers) {
    CpuDevice dev(64);
    std::atomic<int> done{0};
    dev.stream(StreamKind::SwapIn).enqueue([] { fail("bad swap"); });
    for (StreamKind s : {StreamKind::Compute, StreamKind::SwapOut, StreamKind::Comm})
        dev.stream(s).enqueue([&] {
            std::this_thread::sleep_for(10ms);
            done++;
        });
    EXPECT_EQ(error_of<Error>([&] { dev.synchronize(); }), "on the swap-in stream: bad swap");
    EXPECT_EQ(done.load(), 3);
    dev.synchronize();  // reported once
}

TEST(CpuDevice, NonTesseraExceptionsBecomeInternalErrors) {
    CpuDevice dev(64);
    dev.stream(StreamKind::Comm).enqueue([] { throw std::out_of_range("vector::at"); });
    std::string msg = error_of<InternalError>([&] { dev.synchronize(); });
    EXPECT_EQ(msg.rfind("on the comm stream: vector::at", 0), 0u) << msg;
}

TEST(CpuDevice, AFailedStreamStillCompletesItsEventsSoOthersDoNotHang) {
    CpuDevice dev(64);
    auto e = dev.create_event();
    bool after_wait = false;
    dev.stream(StreamKind::SwapIn).enqueue([] { fail("swap-in failed"); });
    dev.stream(StreamKind::SwapIn).record(*e);
    dev.stream(StreamKind::Compute).wait(*e);
    dev.stream(StreamKind::Compute).enqueue([&] { after_wait = true; });
    EXPECT_EQ(error_of<Error>([&] { dev.synchronize(); }), "on the swap-in stream: swap-in failed");
    EXPECT_TRUE(after_wait);
}

TEST(CpuDevice, DestructionFinishesQueuedWork) {
    auto count = std::make_shared<std::atomic<int>>(0);
    {
        CpuDevice dev(64);
        for (int k = 0; k < kNumStreams; k++)
            for (int i = 0; i < 100; i++) dev.stream(static_cast<StreamKind>(k)).enqueue([count] { (*count)++; });
    }
    EXPECT_EQ(count->load(), kNumStreams * 100);
}

// ---- counters ----

TEST(Counters, PeakFollowsLiveBytesAndResets) {
    CpuDevice dev(64);
    dev.add_live_bytes(100);
    dev.add_live_bytes(50);
    dev.add_live_bytes(-120);
    MemoryCounters c = dev.counters();
    EXPECT_EQ(c.live_bytes, 30);
    EXPECT_EQ(c.peak_live_bytes, 150);
    dev.note_arena_use(48);
    dev.note_arena_use(16);
    EXPECT_EQ(dev.counters().arena_high_water, 48);
    dev.reset_peak();
    c = dev.counters();
    EXPECT_EQ(c.peak_live_bytes, 30);
    EXPECT_EQ(c.arena_high_water, 0);
    dev.add_swap_out_bytes(7);
    dev.add_swap_in_bytes(9);
    dev.add_comm_bytes(11);
    c = dev.counters();
    EXPECT_EQ(c.swap_out_bytes, 7);
    EXPECT_EQ(c.swap_in_bytes, 9);
    EXPECT_EQ(c.comm_bytes, 11);
    dev.reset_counters();
    EXPECT_EQ(dev.counters(), MemoryCounters{});
}

TEST(Counters, AreExactUnderConcurrentUpdatesFromAllStreams) {
    CpuDevice dev(64);
    for (int k = 0; k < kNumStreams; k++)
        for (int i = 0; i < 1000; i++)
            dev.stream(static_cast<StreamKind>(k)).enqueue([&dev, k] {
                dev.add_live_bytes(k + 1);
                dev.add_comm_bytes(1);
            });
    dev.synchronize();
    static_assert(kNumStreams == 5);
    EXPECT_EQ(dev.counters().live_bytes, 1000 * (1 + 2 + 3 + 4 + 5));
    EXPECT_EQ(dev.counters().peak_live_bytes, 1000 * (1 + 2 + 3 + 4 + 5));
    EXPECT_EQ(dev.counters().comm_bytes, 5000);
}

TEST(StreamNames, RoundTrip) {
    for (int k = 0; k < kNumStreams; k++)
        EXPECT_EQ(stream_from_name(stream_name(static_cast<StreamKind>(k))), static_cast<StreamKind>(k));
    EXPECT_EQ(error_of<Error>([] { stream_from_name("gpu"); }),
              "unknown stream 'gpu'; expected one of compute, swap-out, swap-in, comm, host");
}

}  // namespace
}  // namespace tessera
