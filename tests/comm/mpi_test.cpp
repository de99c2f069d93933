// The MPI backend under mpirun (run with 3 and 4 ranks): every collective on
// the world, on a reversed world, on an unsorted subset, and on the level
// groups, against values each rank computes locally; the byte counters; a
// large all_reduce (MPI's rendezvous path); the watchdog (rank 0 skips a
// collective and the others must time out with the right message); and a size
// mismatch. A plain main, because MPI must be initialised before any check
// runs. It prints each mismatch and exits non-zero when any rank saw one.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "tessera/comm/communicator.h"
#include "tessera/comm/launcher.h"
#include "tessera/error.h"

namespace tessera {
namespace {

int g_rank = -1;
int g_checks = 0, g_failures = 0;

void check(bool ok, const std::string &what) {
    g_checks++;
    if (ok) return;
    g_failures++;
    std::cerr << "comm_mpi_test: rank " << g_rank << ": FAILED: " << what << "\n";
}

template<typename... Args>
std::string str(const Args &...args) {
    std::ostringstream os;
    (os << ... << args);
    return os.str();
}

float value(int rank, size_t i) { return 0.5f + static_cast<float>((rank * 7919 + i * 104729) % 1000) / 1000.0f; }
unsigned char pattern(int a, int b, size_t i) { return static_cast<unsigned char>(a * 37 + b * 11 + i * 5 + 1); }
size_t chunk(size_t count, int k, int c) { return count / k + (static_cast<size_t>(c) < count % k ? 1 : 0); }
int64_t sent(const Communicator &c, CommOp op) { return c.counters().bytes[static_cast<int>(op)]; }

uint64_t fnv1a(const void *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ static_cast<const unsigned char *>(p)[i]) * 1099511628211ull;
    return h;
}

void check_all_reduce(Communicator &c, const Group &g, size_t count) {
    const int k = g.size(), me = g.index_of(c.rank());
    std::vector<float> x(count);
    for (size_t i = 0; i < count; i++) x[i] = value(c.rank(), i);
    c.reset_counters();
    c.all_reduce(x.data(), count, g);
    const std::string where = str("all_reduce of ", count, " over ", g.str());
    int wrong = 0;
    for (size_t i = 0; i < count; i++) {
        double sum = 0;
        for (int r : g.ranks) sum += value(r, i);
        if (!(std::fabs(x[i] - sum) <= 1e-6 * sum) && wrong++ < 3)
            check(false, str(where, ": element ", i, " is ", x[i], ", expected ", sum));
    }
    check(wrong == 0, str(where, ": ", wrong, " wrong elements"));
    int64_t expected = k == 1 || count == 0
                           ? 0
                           : 4 * static_cast<int64_t>(2 * count - chunk(count, k, me) - chunk(count, k, (me + 1) % k));
    check(sent(c, CommOp::AllReduce) == expected,
          str(where, ": counted ", sent(c, CommOp::AllReduce), " bytes, expected ", expected));
    check(c.counters().calls[static_cast<int>(CommOp::AllReduce)] == 1, str(where, ": call not counted once"));
    // Identical bits on every member: compare hashes of the results.
    uint64_t h = fnv1a(x.data(), count * sizeof(float));
    std::vector<uint64_t> hashes(k);
    c.all_gather(&h, hashes.data(), sizeof h, g);
    for (int m = 0; m < k; m++) check(hashes[m] == h, str(where, ": rank ", g.ranks[m], " ended with other bits"));
}

void check_reduce_scatter(Communicator &c, const Group &g, size_t ce) {
    const int k = g.size(), me = g.index_of(c.rank());
    std::vector<float> in(k * ce), out(ce, -1);
    for (size_t i = 0; i < in.size(); i++) in[i] = value(c.rank(), i);
    c.reset_counters();
    c.reduce_scatter(in.data(), out.data(), ce, g);
    const std::string where = str("reduce_scatter of ", ce, " per member over ", g.str());
    for (size_t i = 0; i < ce; i++) {
        double sum = 0;
        for (int r : g.ranks) sum += value(r, me * ce + i);
        check(std::fabs(out[i] - sum) <= 1e-6 * sum, str(where, ": element ", i, " is ", out[i], ", expected ", sum));
    }
    check(sent(c, CommOp::ReduceScatter) == 4 * static_cast<int64_t>((k - 1) * ce),
          str(where, ": counted ", sent(c, CommOp::ReduceScatter), " bytes"));
}

void check_all_gather(Communicator &c, const Group &g, size_t b) {
    const int k = g.size();
    std::vector<unsigned char> in(b), out(k * b, 0xEE);
    for (size_t i = 0; i < b; i++) in[i] = pattern(c.rank(), 0, i);
    c.reset_counters();
    c.all_gather(in.data(), out.data(), b, g);
    const std::string where = str("all_gather of ", b, " over ", g.str());
    bool ok = true;
    for (int j = 0; j < k; j++)
        for (size_t i = 0; i < b; i++) ok = ok && out[j * b + i] == pattern(g.ranks[j], 0, i);
    check(ok, str(where, ": wrong blocks"));
    check(sent(c, CommOp::AllGather) == static_cast<int64_t>((k - 1) * b),
          str(where, ": counted ", sent(c, CommOp::AllGather), " bytes"));
}

void check_all_to_all(Communicator &c, const Group &g, size_t b) {
    const int k = g.size(), me = g.index_of(c.rank());
    std::vector<unsigned char> in(k * b), out(k * b, 0xEE);
    for (int j = 0; j < k; j++)
        for (size_t i = 0; i < b; i++) in[j * b + i] = pattern(c.rank(), j, i);
    c.reset_counters();
    c.all_to_all(in.data(), out.data(), b, g);
    const std::string where = str("all_to_all of ", b, " over ", g.str());
    bool ok = true;
    for (int j = 0; j < k; j++)
        for (size_t i = 0; i < b; i++) ok = ok && out[j * b + i] == pattern(g.ranks[j], me, i);
    check(ok, str(where, ": wrong blocks"));
    check(sent(c, CommOp::AllToAll) == static_cast<int64_t>((k - 1) * b),
          str(where, ": counted ", sent(c, CommOp::AllToAll), " bytes"));
}

void check_broadcast(Communicator &c, const Group &g, size_t b) {
    const int k = g.size(), me = g.index_of(c.rank());
    for (int root_index = 0; root_index < k; root_index++) {
        const int root = g.ranks[root_index];
        std::vector<unsigned char> buf(b, 0xEE);
        if (c.rank() == root)
            for (size_t i = 0; i < b; i++) buf[i] = pattern(root, 1, i);
        c.reset_counters();
        c.broadcast(buf.data(), b, root, g);
        const std::string where = str("broadcast of ", b, " from ", root, " over ", g.str());
        bool ok = true;
        for (size_t i = 0; i < b; i++) ok = ok && buf[i] == pattern(root, 1, i);
        check(ok, str(where, ": wrong bytes"));
        // Binomial tree: relative rank r sends to r + m for powers of two m below its lowest set bit.
        int r = ((me - root_index) % k + k) % k, children = 0;
        for (int m = 1; m < k; m *= 2)
            if ((r == 0 || m < (r & -r)) && r + m < k) children++;
        check(sent(c, CommOp::Broadcast) == static_cast<int64_t>(children * b),
              str(where, ": counted ", sent(c, CommOp::Broadcast), " bytes, expected ", children * b));
    }
}

void check_group_ops(Communicator &c, const Group &g) {
    if (g.index_of(c.rank()) < 0) return;
    for (size_t count : {0, 1, 5, 1000}) check_all_reduce(c, g, count);
    for (size_t ce : {1, 7}) check_reduce_scatter(c, g, ce);
    for (size_t b : {1, 33}) check_all_gather(c, g, b);
    for (size_t b : {1, 20}) check_all_to_all(c, g, b);
    for (size_t b : {1, 100}) check_broadcast(c, g, b);
    c.reset_counters();
    c.barrier(g);
    check(c.counters().total() == 0, str("barrier over ", g.str(), " counted bytes"));
}

bool starts_with(const std::string &s, const std::string &prefix) { return s.rfind(prefix, 0) == 0; }

// Rank 0 skips an all_reduce; the others must time out, naming what they wait for.
void check_watchdog(int n) {
    auto wd = make_mpi_communicator();
    wd->set_timeout(1.0);
    const int me = wd->rank();
    const std::string head = str("rank ", me, ": all_reduce over ranks ", wd->world_group().str(), " timed out after 1 s waiting for rank ");
    if (me != 0) {
        std::vector<float> x(6, 1.0f);
        std::string error;
        try {
            wd->all_reduce(x.data(), x.size(), wd->world_group());
        } catch (const Error &e) {
            error = e.what();
        }
        // Rank 1 waits for rank 0 at its first step; the others wait further along the ring.
        if (me == 1)
            check(error == head + "0", str("watchdog message: '", error, "'"));
        else
            check(starts_with(error, head), str("watchdog message: '", error, "'"));
        std::string again;
        try {
            wd->barrier(wd->world_group());
        } catch (const Error &e) {
            again = e.what();
        }
        check(again.find("on a broken communicator") != std::string::npos, str("after a timeout: '", again, "'"));
    }
    // Resync on a fresh communicator: the old one still holds unmatched messages.
    auto resync = make_mpi_communicator();
    resync->set_timeout(30);
    resync->barrier(resync->world_group());
    (void)n;
}

// Rank 0 passes 8 bytes where the others pass 4: nobody may read garbage.
void check_size_mismatch() {
    auto mm = make_mpi_communicator();
    mm->set_timeout(2.0);
    const int me = mm->rank(), n = mm->size();
    const size_t b = me == 0 ? 8 : 4;
    std::vector<unsigned char> in(b), out(n * b);
    std::string error;
    try {
        mm->all_gather(in.data(), out.data(), b, mm->world_group());
    } catch (const Error &e) {
        error = e.what();
    }
    const std::string head = str("rank ", me, ": all_gather over ranks ", mm->world_group().str(), " ");
    if (me == 0)
        check(starts_with(error, head + str("received 4 bytes from rank ", n - 1, " but expected 8")),
              str("size mismatch message: '", error, "'"));
    else if (me == 1)
        check(starts_with(error, head + "received more than 4 bytes from rank 0 but expected 4"),
              str("size mismatch message: '", error, "'"));
    else
        check(starts_with(error, head), str("size mismatch: no error or a wrong one: '", error, "'"));
    auto resync = make_mpi_communicator();
    resync->set_timeout(30);
    resync->barrier(resync->world_group());
}

int run() {
    auto world = make_mpi_communicator();
    world->set_timeout(60);  // a bug shows as an error, not as a hang until ctest's limit
    const int n = world->size(), me = world->rank();
    g_rank = me;
    check(mpi_available(), "mpi_available() is false");
    check(std::string(world->backend()) == "mpi", "backend is not mpi");
    check(detect_launch().size == n, str("launcher says ", detect_launch().size, " processes; MPI says ", n));
    // One host: MPI_COMM_TYPE_SHARED holds the whole world.
    check(world->local_rank() == me && world->local_size() == n && world->node() == 0 && world->num_nodes() == 1,
          str("placement: local rank ", world->local_rank(), " of ", world->local_size(), ", node ", world->node(),
              " of ", world->num_nodes()));

    Group all = world->world_group(), reversed, subset{{n - 1, 0}};
    for (int r = n - 1; r >= 0; r--) reversed.ranks.push_back(r);
    for (int r = 2; r < n - 1; r++) subset.ranks.push_back(r);
    for (const Group &g : {all, reversed, subset}) check_group_ops(*world, g);
    const std::vector<int> cuts = n == 4 ? std::vector<int>{2, 2} : std::vector<int>{n};
    for (const Group &g : level_groups(cuts, me, n)) check_group_ops(*world, g);

    // Point to point: a ring shift.
    int out = 1000 + me, in = -1;
    world->reset_counters();
    world->sendrecv(&out, sizeof out, (me + 1) % n, &in, sizeof in, (me + n - 1) % n);
    check(in == 1000 + (me + n - 1) % n, str("sendrecv got ", in));
    check(sent(*world, CommOp::SendRecv) == static_cast<int64_t>(sizeof out), "sendrecv bytes");

    // Large enough for OpenMPI's rendezvous protocol, with uneven chunks.
    check_all_reduce(*world, all, (size_t{3} << 20) + 7);

    check_watchdog(n);
    check_size_mismatch();

    // Every rank exits with the same verdict.
    float failures = static_cast<float>(g_failures);
    auto verdict = make_mpi_communicator();
    verdict->set_timeout(30);
    verdict->all_reduce(&failures, 1, verdict->world_group());
    std::cout << "comm_mpi_test: rank " << me << " of " << n << ": " << g_checks << " checks, " << g_failures
              << " failed here, " << failures << " failed on all ranks\n";
    return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace tessera

int main(int argc, char **argv) {
    try {
        tessera::mpi_init(&argc, &argv);
    } catch (const std::exception &e) {
        std::cerr << "comm_mpi_test: " << e.what() << "\n";
        return 1;
    }
    // --abort-on-rank R: rank R ends the job with mpi_abort(3) while the others
    // wait in a barrier with no timeout; mpi_abort_test.sh checks that the job ends.
    if (argc == 3 && std::string(argv[1]) == "--abort-on-rank") {
        auto world = tessera::make_mpi_communicator();
        if (world->rank() == std::stoi(argv[2])) {
            // One write: std::cerr flushes after every <<, and mpirun's abort
            // banner once landed between the pieces of this line.
            std::cerr << ("comm_mpi_test: rank " + std::to_string(world->rank()) +
                          " aborts the job\n");
            tessera::mpi_abort(3);
        }
        world->barrier(world->world_group());
        std::cerr << "comm_mpi_test: rank " << world->rank() << " passed a barrier it should never pass\n";
        return 0;
    }
    int code = 1;
    try {
        code = tessera::run();
    } catch (const std::exception &e) {
        std::cerr << "comm_mpi_test: rank " << tessera::g_rank << ": " << e.what() << "\n";
        tessera::mpi_abort(2);  // the others would wait for this rank forever
    }
    tessera::mpi_finalize();
    return code;
}
