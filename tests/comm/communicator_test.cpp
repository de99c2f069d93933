// The communicator's collectives over the in-process backend, one thread per
// rank: every collective against plain loops over the members' inputs, on the
// whole world, on reordered and partial groups, and on two disjoint groups at
// once; the byte counters against counts worked out from the chunk sizes; the
// watchdog's message; every user error's message; level_groups against the
// coordinate formula.
//
// Test names start with "comm" so that `ctest -R comm` selects them.
#include "tessera/comm/communicator.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "expect_error.h"
#include "tessera/error.h"
#include "tessera/half.h"

namespace tessera {
namespace {

using test::expect_error;
using Comms = std::vector<std::unique_ptr<Communicator>>;

// Runs body(comm) for every rank on its own thread; each rank's error text, "" when it succeeded.
std::vector<std::string> run_ranks(Comms &comms, const std::function<void(Communicator &)> &body) {
    std::vector<std::string> errors(comms.size());
    std::vector<std::thread> threads;
    for (size_t r = 0; r < comms.size(); r++) {
        threads.emplace_back([&, r] {
            try {
                body(*comms[r]);
            } catch (const std::exception &e) {
                errors[r] = e.what();
            }
        });
    }
    for (auto &t : threads) t.join();
    return errors;
}

void expect_no_errors(const std::vector<std::string> &errors) {
    for (size_t r = 0; r < errors.size(); r++) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// Disjoint groups that run at the same time; ranks in none of them sit out.
using Layout = std::vector<Group>;

std::vector<Layout> layouts(int n) {
    std::vector<Layout> out;
    Group world, reversed;
    for (int r = 0; r < n; r++) world.ranks.push_back(r);
    for (int r = n - 1; r >= 0; r--) reversed.ranks.push_back(r);
    out.push_back({world});
    if (n >= 2) out.push_back({reversed});
    if (n >= 3) {  // all but rank 1, not sorted: [n-1, 0, 2, ..., n-2]
        Group g{{n - 1, 0}};
        for (int r = 2; r < n - 1; r++) g.ranks.push_back(r);
        out.push_back({g});
    }
    if (n >= 4) {  // evens descending and odds rotated, at once
        Group evens, odds;
        for (int r = (n - 1) / 2 * 2; r >= 0; r -= 2) evens.ranks.push_back(r);
        for (int r = 3; r < n; r += 2) odds.ranks.push_back(r);
        odds.ranks.push_back(1);
        out.push_back({evens, odds});
    }
    return out;
}

const Group *group_of(const Layout &layout, int rank) {
    for (const Group &g : layout)
        if (g.index_of(rank) >= 0) return &g;
    return nullptr;
}

// Inputs in [0.5, 1.5): positive, so the relative error of a float sum stays small.
float value(int rank, size_t i) { return 0.5f + static_cast<float>((rank * 7919 + i * 104729) % 1000) / 1000.0f; }
unsigned char pattern(int a, int b, size_t i) { return static_cast<unsigned char>(a * 37 + b * 11 + i * 5 + 1); }

size_t chunk(size_t count, int k, int c) { return count / k + (static_cast<size_t>(c) < count % k ? 1 : 0); }

// What one rank kept of each collective it ran: the buffer and its counters.
struct RankResult {
    std::vector<std::vector<float>> floats;
    std::vector<std::vector<unsigned char>> bytes;
    std::vector<CommCounters> counters;

    void keep(std::vector<float> out, const Communicator &c) {
        floats.push_back(std::move(out));
        counters.push_back(c.counters());
    }
    void keep(std::vector<unsigned char> out, const Communicator &c) {
        bytes.push_back(std::move(out));
        counters.push_back(c.counters());
    }
};

// Each rank of `n` thread communicators that is a member of a group of
// `layout` runs member(c, its group, its result); the results, by rank. Any
// rank's error fails the test.
using Member = std::function<void(Communicator &, const Group &, RankResult &)>;
std::vector<RankResult> run_groups(int n, const Layout &layout, const Member &member) {
    Comms comms = make_thread_communicators(n);
    std::vector<RankResult> res(n);
    expect_no_errors(run_ranks(comms, [&](Communicator &c) {
        if (const Group *g = group_of(layout, c.rank())) member(c, *g, res[c.rank()]);
    }));
    return res;
}

class Collectives : public ::testing::TestWithParam<int> {};

TEST_P(Collectives, AllReduceMatchesDoubleSumWithIdenticalBits) {
    const int n = GetParam();
    const std::vector<size_t> counts = {0, 1, 2, 3, 7, 37, 1000};
    for (const Layout &layout : layouts(n)) {
        // Twice on fresh communicators: the bits must not depend on thread timing.
        std::vector<std::vector<RankResult>> runs;
        for (int run = 0; run < 2; run++)
            runs.push_back(run_groups(n, layout, [&](Communicator &c, const Group &g, RankResult &res) {
                for (size_t count : counts) {
                    std::vector<float> data(count);
                    for (size_t i = 0; i < count; i++) data[i] = value(c.rank(), i);
                    c.reset_counters();
                    c.all_reduce(data.data(), count, g);
                    res.keep(std::move(data), c);
                }
            }));
        for (const Group &g : layout) {
            const int k = g.size();
            for (size_t ci = 0; ci < counts.size(); ci++) {
                const size_t count = counts[ci];
                const std::vector<float> &first = runs[0][g.ranks[0]].floats[ci];
                for (size_t i = 0; i < count; i++) {
                    double sum = 0;
                    for (int r : g.ranks) sum += value(r, i);
                    EXPECT_NEAR(first[i], sum, 1e-6 * sum) << g.str() << " count " << count << " element " << i;
                }
                for (int m = 0; m < k; m++) {
                    const int r = g.ranks[m];
                    for (int run = 0; run < 2; run++)
                        EXPECT_TRUE(count == 0 || std::memcmp(runs[run][r].floats[ci].data(), first.data(),
                                                              count * sizeof(float)) == 0)
                            << g.str() << " count " << count << ": rank " << r << " run " << run
                            << " differs in bits from rank " << g.ranks[0] << " run 0";
                    // Reduce-scatter sends every chunk but its own; all-gather every chunk but the next member's.
                    int64_t expected = k == 1 || count == 0
                                           ? 0
                                           : 4 * static_cast<int64_t>(2 * count - chunk(count, k, m) -
                                                                      chunk(count, k, (m + 1) % k));
                    const CommCounters &cc = runs[0][r].counters[ci];
                    EXPECT_EQ(cc.bytes[static_cast<int>(CommOp::AllReduce)], expected) << g.str() << " count " << count;
                    EXPECT_EQ(cc.total(), expected);
                    EXPECT_EQ(cc.calls[static_cast<int>(CommOp::AllReduce)], 1);
                }
            }
        }
    }
}

// Doubles (batch norm's statistics): the sum to double precision, identical
// bits on every member, 8 bytes an element counted like the float ring.
TEST_P(Collectives, AllReduceOfDoublesSumsInDouble) {
    const int n = GetParam();
    const std::vector<size_t> counts = {1, 3, 37};
    // value + 1e-9 * rank: a float sum would lose the second term.
    auto dvalue = [](int rank, size_t i) { return double(value(rank, i)) + 1e-9 * (rank + 1); };
    for (const Layout &layout : layouts(n)) {
        Comms comms = make_thread_communicators(n);
        std::vector<std::vector<std::vector<double>>> got(n);
        std::vector<std::vector<int64_t>> sent(n);
        expect_no_errors(run_ranks(comms, [&](Communicator &c) {
            const Group *g = group_of(layout, c.rank());
            if (!g) return;
            for (size_t count : counts) {
                std::vector<double> data(count);
                for (size_t i = 0; i < count; i++) data[i] = dvalue(c.rank(), i);
                c.reset_counters();
                c.all_reduce_f64(data.data(), count, *g);
                got[c.rank()].push_back(data);
                sent[c.rank()].push_back(c.counters().bytes[static_cast<int>(CommOp::AllReduce)]);
            }
        }));
        for (const Group &g : layout) {
            const int k = g.size();
            for (size_t ci = 0; ci < counts.size(); ci++) {
                const size_t count = counts[ci];
                for (size_t i = 0; i < count; i++) {
                    double sum = 0;
                    for (int r : g.ranks) sum += dvalue(r, i);
                    EXPECT_NEAR(got[g.ranks[0]][ci][i], sum, 1e-14 * sum) << g.str() << " element " << i;
                }
                for (int m = 0; m < k; m++) {
                    const int r = g.ranks[m];
                    EXPECT_EQ(std::memcmp(got[r][ci].data(), got[g.ranks[0]][ci].data(), count * sizeof(double)), 0)
                        << g.str() << " count " << count << ": rank " << r;
                    const int64_t expected =
                        k == 1 ? 0 : 8 * static_cast<int64_t>(2 * count - chunk(count, k, m) - chunk(count, k, (m + 1) % k));
                    EXPECT_EQ(sent[r][ci], expected) << g.str() << " count " << count << " rank " << r;
                }
            }
        }
    }
}

TEST_P(Collectives, ReduceScatterGivesMemberJTheSumOfChunkJ) {
    const int n = GetParam();
    const std::vector<size_t> counts = {0, 1, 3, 17};
    for (const Layout &layout : layouts(n)) {
        const std::vector<RankResult> res = run_groups(n, layout, [&](Communicator &c, const Group &g, RankResult &r) {
            for (size_t ce : counts) {
                std::vector<float> in(g.size() * ce), out(ce, -1.0f);
                for (size_t i = 0; i < in.size(); i++) in[i] = value(c.rank(), i);
                c.reset_counters();
                c.reduce_scatter(in.data(), out.data(), ce, g);
                r.keep(std::move(out), c);
            }
        });
        for (const Group &g : layout) {
            const int k = g.size();
            for (size_t ci = 0; ci < counts.size(); ci++) {
                const size_t ce = counts[ci];
                for (int j = 0; j < k; j++) {
                    const std::vector<float> &out = res[g.ranks[j]].floats[ci];
                    for (size_t i = 0; i < ce; i++) {
                        double sum = 0;
                        for (int r : g.ranks) sum += value(r, j * ce + i);
                        EXPECT_NEAR(out[i], sum, 1e-6 * sum) << g.str() << " member " << j << " element " << i;
                    }
                    EXPECT_EQ(res[g.ranks[j]].counters[ci].bytes[static_cast<int>(CommOp::ReduceScatter)],
                              4 * static_cast<int64_t>((k - 1) * ce));
                    EXPECT_EQ(res[g.ranks[j]].counters[ci].calls[static_cast<int>(CommOp::ReduceScatter)], 1);
                }
            }
        }
    }
}

// Chunks of unequal sizes (an uneven split: member j's block has j % 3 + 4
// floats, one member's none): member j gets the sum of its chunk, and sends
// every chunk but its own.
TEST_P(Collectives, ReduceScatterWithUnequalChunks) {
    const int n = GetParam();
    for (const Layout &layout : layouts(n)) {
        auto counts_of = [](int k) {
            std::vector<size_t> c(k);
            for (int j = 0; j < k; j++) c[j] = j == 1 ? 0 : static_cast<size_t>(j % 3 + 4);
            return c;
        };
        const std::vector<RankResult> res = run_groups(n, layout, [&](Communicator &c, const Group &g, RankResult &r) {
            const std::vector<size_t> counts = counts_of(g.size());
            size_t total = 0;
            for (size_t x : counts) total += x;
            std::vector<float> in(total), out(counts[g.index_of(c.rank())], -1.0f);
            for (size_t i = 0; i < in.size(); i++) in[i] = value(c.rank(), i);
            c.reset_counters();
            c.reduce_scatter(in.data(), out.data(), counts, g);
            r.keep(std::move(out), c);
        });
        for (const Group &g : layout) {
            const int k = g.size();
            const std::vector<size_t> counts = counts_of(k);
            size_t offset = 0, total = 0;
            for (size_t x : counts) total += x;
            for (int j = 0; j < k; j++) {
                const std::vector<float> &out = res[g.ranks[j]].floats[0];
                ASSERT_EQ(out.size(), counts[j]);
                for (size_t i = 0; i < counts[j]; i++) {
                    double sum = 0;
                    for (int r : g.ranks) sum += value(r, offset + i);
                    EXPECT_NEAR(out[i], sum, 1e-6 * sum) << g.str() << " member " << j << " element " << i;
                }
                offset += counts[j];
                const int64_t want = k == 1 ? 0 : 4 * static_cast<int64_t>(total - counts[j]);
                EXPECT_EQ(res[g.ranks[j]].counters[0].bytes[static_cast<int>(CommOp::ReduceScatter)], want)
                    << g.str() << " member " << j;
            }
        }
    }
}

TEST_P(Collectives, AllGatherConcatenatesInGroupOrder) {
    const int n = GetParam();
    const std::vector<size_t> sizes = {0, 1, 5, 64};
    for (const Layout &layout : layouts(n)) {
        for (bool in_place : {false, true}) {
            const std::vector<RankResult> res = run_groups(n, layout, [&](Communicator &c, const Group &g,
                                                                          RankResult &r) {
                const int me = g.index_of(c.rank());
                for (size_t b : sizes) {
                    std::vector<unsigned char> in(b), out(g.size() * b, 0xEE);
                    for (size_t i = 0; i < b; i++) in[i] = pattern(c.rank(), 0, i);
                    if (in_place && b > 0) std::memcpy(out.data() + me * b, in.data(), b);
                    c.reset_counters();
                    c.all_gather(in_place ? out.data() + me * b : in.data(), out.data(), b, g);
                    r.keep(std::move(out), c);
                }
            });
            for (const Group &g : layout) {
                for (size_t si = 0; si < sizes.size(); si++) {
                    const size_t b = sizes[si];
                    for (int r : g.ranks) {
                        const auto &out = res[r].bytes[si];
                        for (int j = 0; j < g.size(); j++)
                            for (size_t i = 0; i < b; i++)
                                ASSERT_EQ(out[j * b + i], pattern(g.ranks[j], 0, i))
                                    << g.str() << " rank " << r << " block " << j << " byte " << i;
                        EXPECT_EQ(res[r].counters[si].bytes[static_cast<int>(CommOp::AllGather)],
                                  static_cast<int64_t>((g.size() - 1) * b));
                    }
                }
            }
        }
    }
}

TEST_P(Collectives, AllToAllDeliversBlockJToMemberJ) {
    const int n = GetParam();
    const std::vector<size_t> sizes = {0, 1, 6, 64};
    for (const Layout &layout : layouts(n)) {
        const std::vector<RankResult> res = run_groups(n, layout, [&](Communicator &c, const Group &g, RankResult &r) {
            for (size_t b : sizes) {
                std::vector<unsigned char> in(g.size() * b), out(g.size() * b, 0xEE);
                for (int j = 0; j < g.size(); j++)
                    for (size_t i = 0; i < b; i++) in[j * b + i] = pattern(c.rank(), j, i);
                c.reset_counters();
                c.all_to_all(in.data(), out.data(), b, g);
                r.keep(std::move(out), c);
            }
        });
        for (const Group &g : layout) {
            for (size_t si = 0; si < sizes.size(); si++) {
                const size_t b = sizes[si];
                for (int me = 0; me < g.size(); me++) {
                    const auto &out = res[g.ranks[me]].bytes[si];
                    for (int i = 0; i < g.size(); i++)
                        for (size_t x = 0; x < b; x++)
                            ASSERT_EQ(out[i * b + x], pattern(g.ranks[i], me, x))
                                << g.str() << " member " << me << " block from member " << i << " byte " << x;
                    EXPECT_EQ(res[g.ranks[me]].counters[si].bytes[static_cast<int>(CommOp::AllToAll)],
                              static_cast<int64_t>((g.size() - 1) * b));
                }
            }
        }
    }
}

// Children of relative rank r in a binomial tree of k: r + m for each power of
// two m below r's lowest set bit (every power of two below k for the root).
int binomial_children(int r, int k) {
    int children = 0;
    for (int m = 1; m < k; m *= 2) {
        bool below_low_bit = r == 0 || m < (r & -r);
        if (below_low_bit && r + m < k) children++;
    }
    return children;
}

TEST_P(Collectives, BroadcastFromEveryRoot) {
    const int n = GetParam();
    const std::vector<size_t> sizes = {0, 1, 100};
    for (const Layout &layout : layouts(n)) {
        // Every member of every group takes a turn as root.
        size_t turns = 0;
        for (const Group &g : layout) turns = std::max(turns, static_cast<size_t>(g.size()));
        const std::vector<RankResult> res = run_groups(n, layout, [&](Communicator &c, const Group &g, RankResult &r) {
            for (size_t t = 0; t < turns; t++) {
                int root = g.ranks[t % g.size()];
                for (size_t b : sizes) {
                    std::vector<unsigned char> buf(b, 0xEE);
                    if (c.rank() == root)
                        for (size_t i = 0; i < b; i++) buf[i] = pattern(root, static_cast<int>(t), i);
                    c.reset_counters();
                    c.broadcast(buf.data(), b, root, g);
                    r.keep(std::move(buf), c);
                }
            }
        });
        for (const Group &g : layout) {
            const int k = g.size();
            for (size_t t = 0; t < turns; t++) {
                const int root_index = static_cast<int>(t % k);
                for (size_t si = 0; si < sizes.size(); si++) {
                    const size_t b = sizes[si], at = t * sizes.size() + si;
                    int64_t total = 0;
                    for (int m = 0; m < k; m++) {
                        const int r = g.ranks[m];
                        for (size_t i = 0; i < b; i++)
                            ASSERT_EQ(res[r].bytes[at][i], pattern(g.ranks[root_index], static_cast<int>(t), i))
                                << g.str() << " root " << g.ranks[root_index] << " rank " << r << " byte " << i;
                        int64_t sent = res[r].counters[at].bytes[static_cast<int>(CommOp::Broadcast)];
                        int rel = ((m - root_index) % k + k) % k;
                        EXPECT_EQ(sent, static_cast<int64_t>(binomial_children(rel, k) * b))
                            << g.str() << " root " << g.ranks[root_index] << " rank " << r;
                        total += sent;
                    }
                    // Whatever the tree, every member but the root receives the buffer exactly once.
                    EXPECT_EQ(total, static_cast<int64_t>((k - 1) * b)) << g.str();
                }
            }
        }
    }
}

TEST_P(Collectives, BarrierHoldsEveryoneUntilAllArrive) {
    const int n = GetParam();
    const int rounds = 6;
    for (const Layout &layout : layouts(n)) {
        Comms comms = make_thread_communicators(n);
        std::vector<std::atomic<int>> phase(n);
        std::vector<std::string> problems(n);
        expect_no_errors(run_ranks(comms, [&](Communicator &c) {
            const Group *g = group_of(layout, c.rank());
            if (!g) return;
            for (int t = 1; t <= rounds; t++) {
                // Nobody can be past barrier t-1 ... t before we arrive at barrier t.
                for (int r : g->ranks)
                    if (phase[r].load() > t) problems[c.rank()] += "a member ran ahead; ";
                if (t % 2 == 1 && c.rank() == g->ranks.back())
                    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // a late arrival
                phase[c.rank()].store(t);
                c.barrier(*g);
                for (int r : g->ranks)
                    if (phase[r].load() < t) problems[c.rank()] += "left the barrier before rank " + std::to_string(r) + " arrived; ";
            }
            if (c.counters().total() != 0) problems[c.rank()] += "counted bytes; ";
            if (c.counters().calls[static_cast<int>(CommOp::Barrier)] != rounds) problems[c.rank()] += "miscounted calls; ";
        }));
        for (int r = 0; r < n; r++) EXPECT_EQ(problems[r], "") << "rank " << r;
    }
}

TEST_P(Collectives, PointToPointAroundTheRing) {
    const int n = GetParam();
    Comms comms = make_thread_communicators(n);
    if (n == 1) {  // alone, there is no valid peer
        int v = 0;
        expect_error([&] { comms[0]->send(&v, sizeof v, 0); }, "rank 0: send to rank 0 is not a valid peer");
        return;
    }
    std::vector<std::vector<int>> got(n), got2(n);
    expect_no_errors(run_ranks(comms, [&](Communicator &c) {
        const int r = c.rank(), next = (r + 1) % n, prev = (r + n - 1) % n;
        std::vector<int> out(10), in(10, -1);
        for (int i = 0; i < 10; i++) out[i] = r * 100 + i;
        c.sendrecv(out.data(), sizeof(int) * 10, next, in.data(), sizeof(int) * 10, prev);
        got[r] = in;
        // Even ranks send to the next odd one, which receives.
        std::vector<int> one(3, -1);
        if (r % 2 == 0 && r + 1 < n) c.send(out.data(), sizeof(int) * 3, r + 1);
        if (r % 2 == 1) c.recv(one.data(), sizeof(int) * 3, r - 1);
        got2[r] = one;
    }));
    for (int r = 0; r < n; r++) {
        const int prev = (r + n - 1) % n;
        for (int i = 0; i < 10; i++) EXPECT_EQ(got[r][i], prev * 100 + i) << "rank " << r;
        if (r % 2 == 1) {
            for (int i = 0; i < 3; i++) EXPECT_EQ(got2[r][i], (r - 1) * 100 + i) << "rank " << r;
        }
        const CommCounters &cc = comms[r]->counters();
        const bool sends = r % 2 == 0 && r + 1 < n, recvs = r % 2 == 1;
        EXPECT_EQ(cc.bytes[static_cast<int>(CommOp::SendRecv)], 40 + (sends ? 12 : 0)) << "rank " << r;
        EXPECT_EQ(cc.calls[static_cast<int>(CommOp::SendRecv)], 1 + (sends || recvs ? 1 : 0)) << "rank " << r;
        EXPECT_EQ(cc.total(), cc.bytes[static_cast<int>(CommOp::SendRecv)]);
    }
}

TEST_P(Collectives, CountersAccumulateAcrossCallsUntilReset) {
    const int n = GetParam();
    Comms comms = make_thread_communicators(n);
    expect_no_errors(run_ranks(comms, [&](Communicator &c) {
        Group g = c.world_group();
        std::vector<float> x(10, 1.0f);
        std::vector<unsigned char> out(n * 4);
        c.all_reduce(x.data(), x.size(), g);
        c.all_reduce(x.data(), x.size(), g);
        c.all_gather(out.data(), out.data(), 4, g);
        EXPECT_EQ(x[0], static_cast<float>(n * n));
        EXPECT_EQ(c.counters().calls[static_cast<int>(CommOp::AllReduce)], 2);
        EXPECT_EQ(c.counters().bytes[static_cast<int>(CommOp::AllGather)], (n - 1) * 4);
        c.reset_counters();
        EXPECT_EQ(c.counters().total(), 0);
        EXPECT_EQ(c.counters().calls[static_cast<int>(CommOp::AllReduce)], 0);
    }));
}

// Values whose float sum depends on the order of its terms: mixed signs and
// magnitudes 1 to 1e4.
float unordered_value(int rank, size_t i) {
    const uint32_t h = static_cast<uint32_t>(rank * 2654435761u + i * 40503u + 12345u) * 2246822519u;
    const float unit = static_cast<float>(h % 200001) / 100000.0f - 1.0f;
    return unit * std::pow(10.0f, static_cast<float>((h >> 20) % 5));
}

// A fused bucket (all_reduce_many) against one all_reduce per buffer: the same
// bits on every member, one call, the bytes of the separate calls together.
// The same buffers packed end to end and all-reduced as one must differ
// somewhere for k >= 3, or these values could not tell the orders apart.
TEST_P(Collectives, AllReduceManyEqualsOneAllReducePerBufferBitForBit) {
    const int n = GetParam();
    const std::vector<size_t> counts = {5, 0, 1, 37, 1000, 3};
    Comms comms = make_thread_communicators(n);
    std::vector<std::vector<std::vector<float>>> alone(n), fused(n);
    std::vector<std::vector<float>> concatenated(n);
    std::vector<int64_t> alone_bytes(n), fused_bytes(n), fused_calls(n);
    auto fill = [&](int rank) {
        std::vector<std::vector<float>> bufs;
        for (size_t b = 0; b < counts.size(); b++) {
            bufs.emplace_back(counts[b]);
            for (size_t i = 0; i < counts[b]; i++) bufs.back()[i] = unordered_value(rank, 1000 * b + i);
        }
        return bufs;
    };
    expect_no_errors(run_ranks(comms, [&](Communicator &c) {
        const Group g = c.world_group();
        const int r = c.rank();
        alone[r] = fill(r);
        for (std::vector<float> &b : alone[r]) c.all_reduce(b.data(), b.size(), g);
        alone_bytes[r] = c.counters().total();
        c.reset_counters();
        fused[r] = fill(r);
        std::vector<float *> ptrs;
        for (std::vector<float> &b : fused[r]) ptrs.push_back(b.data());
        c.all_reduce_many(ptrs, counts, g);
        fused_bytes[r] = c.counters().total();
        fused_calls[r] = c.counters().calls[static_cast<int>(CommOp::AllReduce)];
        for (const std::vector<float> &b : fill(r)) concatenated[r].insert(concatenated[r].end(), b.begin(), b.end());
        c.all_reduce(concatenated[r].data(), concatenated[r].size(), g);
    }));
    bool order_shows = false;
    for (int r = 0; r < n; r++) {
        EXPECT_EQ(fused_bytes[r], alone_bytes[r]) << "rank " << r;
        EXPECT_EQ(fused_calls[r], 1) << "rank " << r;
        size_t at = 0;
        for (size_t b = 0; b < counts.size(); b++)
            for (size_t i = 0; i < counts[b]; i++, at++) {
                ASSERT_EQ(std::memcmp(&fused[r][b][i], &alone[r][b][i], sizeof(float)), 0)
                    << "rank " << r << " buffer " << b << " element " << i << ": fused " << fused[r][b][i]
                    << ", alone " << alone[r][b][i];
                order_shows |= concatenated[r][at] != alone[r][b][i];
            }
    }
    if (n >= 3) {
        EXPECT_TRUE(order_shows) << "these inputs sum to the same bits in any order";
    }
}

// ---- 16-bit floats ----------------------------------------------------------------

// One format's conversions, so that the tests below run for both.
struct Format {
    HalfFormat format;
    const char *name;
    uint16_t (*narrow)(float);
    float (*widen)(uint16_t);
};
const Format kFormats[] = {{HalfFormat::BF16, "bf16", bf16_from_float, float_from_bf16},
                           {HalfFormat::F16, "f16", f16_from_float, float_from_f16}};

// Values in [-8, 8] that 16 bits round: sums in different orders round differently.
uint16_t half_value(const Format &f, int rank, size_t i) {
    const uint32_t h = static_cast<uint32_t>(rank * 2654435761u + i * 40503u + 12345u) * 2246822519u;
    return f.narrow(static_cast<float>(h % 200001) / 12500.0f - 8.0f);
}

// What the ring computes for element i of the chunk member c finishes: member
// c+1's value, then each next member's added in f32 and rounded back, member
// c's last (communicator.cpp's reduce-scatter). Written out as a plain loop.
uint16_t ring_sum(const Format &f, const Group &g, int c, size_t i, bool max) {
    const int k = g.size();
    uint16_t acc = half_value(f, g.ranks[(c + 1) % k], i);
    for (int j = 2; j <= k; j++) {
        const float x = f.widen(acc), y = f.widen(half_value(f, g.ranks[(c + j) % k], i));
        acc = f.narrow(max ? std::max(x, y) : x + y);
    }
    return acc;
}

// all_reduce_many_16: every element rounded in the ring's order (so bit for
// bit the plain loop's), identical on every member, 2 bytes an element counted.
TEST_P(Collectives, AllReduceOf16BitFloatsRoundsEachSumInRingOrder) {
    const int n = GetParam();
    const std::vector<size_t> counts = {7, 0, 300};
    for (const Format &f : kFormats)
        for (bool max : {false, true})
            for (const Layout &layout : layouts(n)) {
                Comms comms = make_thread_communicators(n);
                std::vector<std::vector<std::vector<uint16_t>>> out(n);
                std::vector<int64_t> bytes(n);
                expect_no_errors(run_ranks(comms, [&](Communicator &c) {
                    const Group *g = group_of(layout, c.rank());
                    if (!g) return;
                    std::vector<uint16_t *> ptrs;
                    size_t at = 0;
                    for (size_t count : counts) {
                        out[c.rank()].emplace_back(count);
                        for (size_t i = 0; i < count; i++) out[c.rank()].back()[i] = half_value(f, c.rank(), at + i);
                        at += count;
                    }
                    for (std::vector<uint16_t> &b : out[c.rank()]) ptrs.push_back(b.data());
                    c.all_reduce_many_16(ptrs, counts, f.format, *g, max ? ReduceOp::Max : ReduceOp::Sum);
                    bytes[c.rank()] = c.counters().bytes[static_cast<int>(CommOp::AllReduce)];
                }));
                for (const Group &g : layout) {
                    const int k = g.size();
                    for (int m = 0; m < k; m++) {
                        const int r = g.ranks[m];
                        size_t at = 0;
                        int64_t want = 0;
                        for (size_t b = 0; b < counts.size(); b++) {
                            for (size_t i = 0, c = 0, start = 0; i < counts[b]; i++) {
                                while (i >= start + chunk(counts[b], k, c)) start += chunk(counts[b], k, c++);
                                const uint16_t expect = k == 1 ? half_value(f, r, at + i) : ring_sum(f, g, c, at + i, max);
                                ASSERT_EQ(out[r][b][i], expect) << f.name << (max ? " max " : " sum ") << g.str()
                                                                << " member " << m << " buffer " << b << " element " << i;
                            }
                            at += counts[b];
                            if (k > 1)
                                want += 2 * static_cast<int64_t>(2 * counts[b] - chunk(counts[b], k, m) -
                                                                 chunk(counts[b], k, (m + 1) % k));
                        }
                        EXPECT_EQ(bytes[r], want) << f.name << " " << g.str() << " member " << m;
                    }
                }
            }
}

// reduce_scatter_16: chunk j, summed in the ring's order, reaches member j alone.
TEST_P(Collectives, ReduceScatterOf16BitFloatsRoundsEachSumInRingOrder) {
    const int n = GetParam();
    for (const Format &f : kFormats)
        for (const Layout &layout : layouts(n)) {
            Comms comms = make_thread_communicators(n);
            std::vector<std::vector<uint16_t>> out(n);
            std::vector<int64_t> bytes(n);
            auto counts_of = [](int k) {
                std::vector<size_t> c(k);
                for (int j = 0; j < k; j++) c[j] = j == 1 ? 0 : static_cast<size_t>(j % 3 + 40);
                return c;
            };
            expect_no_errors(run_ranks(comms, [&](Communicator &c) {
                const Group *g = group_of(layout, c.rank());
                if (!g) return;
                const std::vector<size_t> counts = counts_of(g->size());
                std::vector<uint16_t> in;
                for (size_t i = 0; i < std::accumulate(counts.begin(), counts.end(), size_t{0}); i++)
                    in.push_back(half_value(f, c.rank(), i));
                out[c.rank()].assign(counts[g->index_of(c.rank())], 0xffff);
                c.reduce_scatter_16(in.data(), out[c.rank()].data(), counts, f.format, *g);
                bytes[c.rank()] = c.counters().bytes[static_cast<int>(CommOp::ReduceScatter)];
            }));
            for (const Group &g : layout) {
                const int k = g.size();
                const std::vector<size_t> counts = counts_of(k);
                const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
                for (int j = 0, offset = 0; j < k; offset += static_cast<int>(counts[j]), j++) {
                    const int r = g.ranks[j];
                    ASSERT_EQ(out[r].size(), counts[j]);
                    for (size_t i = 0; i < counts[j]; i++) {
                        const uint16_t expect = k == 1 ? half_value(f, r, i) : ring_sum(f, g, j, offset + i, false);
                        ASSERT_EQ(out[r][i], expect) << f.name << " " << g.str() << " member " << j << " element " << i;
                    }
                    EXPECT_EQ(bytes[r], k == 1 ? 0 : 2 * static_cast<int64_t>(total - counts[j])) << f.name << " " << g.str();
                }
            }
        }
}

INSTANTIATE_TEST_SUITE_P(comm, Collectives, ::testing::Values(1, 2, 3, 4, 5, 8),
                         [](const ::testing::TestParamInfo<int> &info) { return "n" + std::to_string(info.param); });

// ---- Watchdog --------------------------------------------------------------------

double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

TEST(comm_watchdog, MembersOfAnAllReduceThatOneNeverJoinsTimeOut) {
    Comms comms = make_thread_communicators(3);
    std::vector<double> took(3);
    auto errors = run_ranks(comms, [&](Communicator &c) {
        if (c.rank() == 1) return;  // never calls
        c.set_timeout(0.3);
        std::vector<float> x(6, 1.0f);
        auto start = std::chrono::steady_clock::now();
        try {
            c.all_reduce(x.data(), x.size(), c.world_group());
        } catch (...) {
            took[c.rank()] = seconds_since(start);
            throw;
        }
    });
    // Rank 2 waits on rank 1 at once. Rank 0 gets rank 2's first chunk, then waits on rank 2.
    EXPECT_EQ(errors[2], "rank 2: all_reduce over ranks [0,1,2] timed out after 0.3 s waiting for rank 1");
    EXPECT_EQ(errors[0], "rank 0: all_reduce over ranks [0,1,2] timed out after 0.3 s waiting for rank 2");
    EXPECT_EQ(errors[1], "");
    for (int r : {0, 2}) {
        EXPECT_GE(took[r], 0.29) << "rank " << r;
        EXPECT_LT(took[r], 3.0) << "rank " << r;
    }
    // Its messages are out of step now, so it refuses to go on.
    std::vector<float> x(6);
    expect_error([&] { comms[0]->all_reduce(x.data(), x.size(), comms[0]->world_group()); },
                 "rank 0: all_reduce over ranks [0,1,2] on a broken communicator: an earlier operation failed part "
                 "way (rank 0: all_reduce over ranks [0,1,2] timed out after 0.3 s waiting for rank 2), so the "
                 "members' messages are out of step; create a new communicator");
}

TEST(comm_watchdog, BroadcastInAnUnsortedSubgroupNamesTheMissingRoot) {
    Comms comms = make_thread_communicators(4);
    Group g{{3, 0, 2}};
    auto errors = run_ranks(comms, [&](Communicator &c) {
        if (c.rank() == 1 || c.rank() == 3) return;  // 1 is not in the group; 3, the root, never calls
        c.set_timeout(0.25);
        std::vector<unsigned char> buf(16);
        c.broadcast(buf.data(), buf.size(), 3, g);
    });
    EXPECT_EQ(errors[0], "rank 0: broadcast over ranks [3,0,2] timed out after 0.25 s waiting for rank 3");
    EXPECT_EQ(errors[2], "rank 2: broadcast over ranks [3,0,2] timed out after 0.25 s waiting for rank 3");
}

// 1e10 s is more nanoseconds than the clock holds: the deadline saturates
// instead of wrapping into the past (which timed out at once).
TEST(comm_watchdog, LateMembersAreFineWithinTheTimeoutOrWithNone) {
    for (double timeout : {0.0, 5.0, 1e10, std::numeric_limits<double>::infinity()}) {
        Comms comms = make_thread_communicators(3);
        std::vector<std::vector<float>> out(3);
        expect_no_errors(run_ranks(comms, [&](Communicator &c) {
            c.set_timeout(timeout);
            EXPECT_EQ(c.timeout(), timeout);
            if (c.rank() == 2) std::this_thread::sleep_for(std::chrono::milliseconds(200));
            std::vector<float> x(5, static_cast<float>(c.rank()));
            c.all_reduce(x.data(), x.size(), c.world_group());
            c.barrier(c.world_group());
            out[c.rank()] = x;
        }));
        for (int r = 0; r < 3; r++) EXPECT_EQ(out[r], std::vector<float>(5, 3.0f)) << "timeout " << timeout;
    }
}

TEST(comm_watchdog, MismatchedSizesAreReportedNotMisread) {
    Comms comms = make_thread_communicators(2);
    auto errors = run_ranks(comms, [&](Communicator &c) {
        c.set_timeout(5);
        size_t b = c.rank() == 0 ? 4 : 8;
        std::vector<unsigned char> in(b), out(2 * b);
        c.all_gather(in.data(), out.data(), b, c.world_group());
    });
    const std::string advice = "; every member must pass the same sizes (and call the same operations in the same order)";
    EXPECT_EQ(errors[0], "rank 0: all_gather over ranks [0,1] received 8 bytes from rank 1 but expected 4" + advice);
    EXPECT_EQ(errors[1], "rank 1: all_gather over ranks [0,1] received 4 bytes from rank 0 but expected 8" + advice);
}

// ---- User errors -----------------------------------------------------------------

TEST(comm_errors, BadGroupsAreNamed) {
    Comms comms = make_thread_communicators(4);
    Communicator &c = *comms[2];
    std::vector<float> x(4);
    std::vector<unsigned char> b(16), o(16);
    expect_error([&] { c.all_reduce(x.data(), 4, Group{}); },
                 "rank 2: all_reduce over an empty group; a group lists the world ranks that take part (0..3), this "
                 "rank included");
    expect_error([&] { c.all_gather(b.data(), o.data(), 1, Group{{0, 2, 2}}); },
                 "rank 2: all_gather over ranks [0,2,2] lists rank 2 twice; a group's ranks must be distinct");
    expect_error([&] { c.reduce_scatter(x.data(), x.data(), 1, Group{{2, 4}}); },
                 "rank 2: reduce_scatter over ranks [2,4] names rank 4, but the world has ranks 0..3");
    expect_error([&] { c.all_to_all(b.data(), o.data(), 1, Group{{-1, 2}}); },
                 "rank 2: all_to_all over ranks [-1,2] names rank -1, but the world has ranks 0..3");
    expect_error([&] { c.barrier(Group{{0, 1}}); },
                 "rank 2: barrier over ranks [0,1] does not include this rank; only the group's members may call its "
                 "collectives");
    expect_error([&] { c.broadcast(b.data(), 4, 0, Group{{2, 3}}); },
                 "rank 2: broadcast over ranks [2,3] has root 0, which is not in the group; the root must be one of "
                 "its members");
    expect_error([&] { c.all_to_all(b.data(), b.data() + 4, 4, Group{{2, 3}}); },
                 "rank 2: all_to_all over ranks [2,3] cannot run in place; give it separate input and output buffers");
    expect_error([&] { c.all_reduce(nullptr, 4, Group{{1, 2}}); },
                 "rank 2: all_reduce of 4 floats over ranks [1,2] got a null buffer");
    // None of these sent anything or counted a byte.
    EXPECT_EQ(c.counters().total(), 0);
}

TEST(comm_errors, BadPeersAreNamed) {
    Comms comms = make_thread_communicators(4);
    Communicator &c = *comms[2];
    int v = 0;
    expect_error([&] { c.send(&v, sizeof v, 2); },
                 "rank 2: send to rank 2 is not a valid peer; it must be another rank in 0..3");
    expect_error([&] { c.recv(&v, sizeof v, 7); },
                 "rank 2: recv from rank 7 is not a valid peer; it must be another rank in 0..3");
    expect_error([&] { c.sendrecv(&v, sizeof v, 1, &v, sizeof v, -1); },
                 "rank 2: sendrecv from rank -1 is not a valid peer; it must be another rank in 0..3");
}

TEST(comm_errors, ThreadCommunicatorsNeedARank) {
    expect_error([] { make_thread_communicators(0); },
                 "make_thread_communicators: 0 ranks requested; need at least 1");
}

TEST(comm_errors, NcclNeedsABuildWithNcclAndAGpu) {
    Comms comms = make_thread_communicators(1);
    if (!nccl_available())
        expect_error([&] { make_nccl_communicator(*comms[0], 0); }, "make_nccl_communicator: built without NCCL");
    else  // Whether or not this host has a GPU, device -1 is never one.
        expect_error([&] { make_nccl_communicator(*comms[0], -1); }, "rank 0 on ");
}

// ---- Names, groups, the launcher's environment -------------------------------------

TEST(comm_basics, NamesGroupsAndCounters) {
    const std::map<CommOp, std::string> names = {
        {CommOp::AllReduce, "all_reduce"}, {CommOp::AllGather, "all_gather"},
        {CommOp::ReduceScatter, "reduce_scatter"}, {CommOp::AllToAll, "all_to_all"},
        {CommOp::SendRecv, "sendrecv"}, {CommOp::Broadcast, "broadcast"}, {CommOp::Barrier, "barrier"}};
    ASSERT_EQ(static_cast<int>(names.size()), kNumCommOps);
    for (const auto &[op, name] : names) EXPECT_EQ(comm_op_name(op), name);

    Group g{{3, 0, 2}};
    EXPECT_EQ(g.str(), "[3,0,2]");
    EXPECT_EQ(Group{}.str(), "[]");
    EXPECT_EQ(g.index_of(2), 2);
    EXPECT_EQ(g.index_of(3), 0);
    EXPECT_EQ(g.index_of(1), -1);
    EXPECT_EQ(g.size(), 3);
    EXPECT_TRUE((g == Group{{3, 0, 2}}));
    EXPECT_FALSE((g == Group{{0, 2, 3}}));

    CommCounters cc;
    cc.bytes[0] = 5;
    cc.bytes[6] = 7;
    EXPECT_EQ(cc.total(), 12);

    Comms comms = make_thread_communicators(5);
    EXPECT_EQ(comms[3]->rank(), 3);
    EXPECT_EQ(comms[3]->size(), 5);
    EXPECT_EQ(comms[3]->world_group(), (Group{{0, 1, 2, 3, 4}}));
    EXPECT_STREQ(comms[3]->backend(), "threads");
    EXPECT_EQ(comms[3]->timeout(), 0.0);
}

TEST(comm_basics, ThreadBackendIsOneHost) {
    Comms comms = make_thread_communicators(3);
    for (int r = 0; r < 3; r++) {
        EXPECT_EQ(comms[r]->local_rank(), r);
        EXPECT_EQ(comms[r]->local_size(), 3);
        EXPECT_EQ(comms[r]->node(), 0);
        EXPECT_EQ(comms[r]->num_nodes(), 1);
    }
}

TEST(comm_basics, MpiEntryPointsMatchTheBuild) {
    // The version is readable before mpi_init() (tessera-train --env needs no job).
    EXPECT_EQ(mpi_library_version().empty(), !mpi_available()) << mpi_library_version();
    EXPECT_EQ(nccl_version().empty(), !nccl_available()) << nccl_version();
    if (mpi_available()) {
        expect_error([] { make_mpi_communicator(); }, "make_mpi_communicator: MPI is not running; call mpi_init() first");
    } else {
        expect_error([] { mpi_init(nullptr, nullptr); },
                     "mpi_init: this build has no MPI (configure with -DTESSERA_MPI=ON)");
        expect_error([] { make_mpi_communicator(); }, "this build has no MPI");
    }
}

// ---- level_groups ----------------------------------------------------------------

// Brute force: enumerate every coordinate tuple, number it with the header's
// formula rank = ((i_1 * k_2) + i_2) * k_3 + ..., and collect the tuples that
// differ from this rank's only at level l, in order of that level's index.
std::vector<Group> brute_force_level_groups(const std::vector<int> &cuts, int rank) {
    std::vector<std::vector<int>> tuples = {{}};
    for (int k : cuts) {
        std::vector<std::vector<int>> next;
        for (const auto &t : tuples)
            for (int i = 0; i < k; i++) {
                auto u = t;
                u.push_back(i);
                next.push_back(u);
            }
        tuples = next;
    }
    auto number = [&](const std::vector<int> &t) {
        int r = 0;
        for (size_t l = 0; l < cuts.size(); l++) r = r * cuts[l] + t[l];
        return r;
    };
    std::vector<int> mine;
    for (const auto &t : tuples)
        if (number(t) == rank) mine = t;
    std::vector<Group> groups(cuts.size());
    for (size_t l = 0; l < cuts.size(); l++) {
        for (int i = 0; i < cuts[l]; i++) {
            auto t = mine;
            t[l] = i;
            groups[l].ranks.push_back(number(t));
        }
    }
    return groups;
}

TEST(comm_level_groups, MatchTheCoordinateFormula) {
    for (const std::vector<int> &cuts : std::vector<std::vector<int>>{{2, 2}, {3}, {2, 2, 2}, {2, 3}, {3, 2}, {1, 4}}) {
        int world = 1;
        for (int k : cuts) world *= k;
        for (int r = 0; r < world; r++) {
            std::vector<Group> got = level_groups(cuts, r, world);
            EXPECT_EQ(got, brute_force_level_groups(cuts, r)) << Group{cuts}.str() << " rank " << r;
            for (const Group &g : got) EXPECT_GE(g.index_of(r), 0);
        }
    }
    // Spot checks that a reader can verify by hand.
    EXPECT_EQ(level_groups({2, 3}, 4, 6), (std::vector<Group>{Group{{1, 4}}, Group{{3, 4, 5}}}));
    EXPECT_EQ(level_groups({2, 2, 2}, 5, 8), (std::vector<Group>{Group{{1, 5}}, Group{{5, 7}}, Group{{4, 5}}}));
    EXPECT_TRUE(level_groups({}, 0, 1).empty());
}

TEST(comm_level_groups, ErrorsNameTheCuts) {
    expect_error([] { level_groups({2, 3}, 0, 4); },
                 "level_groups: cuts [2,3] multiply to 6, but the world has 4 ranks; the cuts' product must equal the "
                 "number of processes");
    expect_error([] { level_groups({2, 0}, 0, 4); }, "level_groups: cut 0 at level 1 of cuts [2,0] must be at least 1");
    expect_error([] { level_groups({4}, 4, 4); }, "level_groups: rank 4 is outside the world of 4 ranks (0..3)");
}

}  // namespace
}  // namespace tessera
