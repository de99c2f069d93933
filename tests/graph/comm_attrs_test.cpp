// The schema of communication nodes' attributes (tessera/graph/comm_attrs.h):
// every kind survives comm_attrs_to then read_comm_attrs; the integers it
// writes are the packing the schema documents, checked here by hand; and
// malformed attributes are refused with the node's name.
#include "tessera/graph/comm_attrs.h"

#include <variant>

#include <gtest/gtest.h>

#include "expect_error.h"
#include "tessera/graph/graph.h"

namespace tessera {
namespace {

using test::expect_error;

Box box(std::vector<int64_t> lo, std::vector<int64_t> hi) { return Box{std::move(lo), std::move(hi)}; }

OpCall node(const CommAttrs &a) { return OpCall{kCommCarrierKind, "c0:x", comm_attrs_to(a)}; }

TEST(CommAttrs, EveryKindRoundTrips) {
    CommAttrs all;
    all.ranks = {2, 0, 1};
    all.bytes = 40;
    all.reduce = "max";
    EXPECT_EQ(read_comm_attrs(node(all), 2), all);

    CommAttrs scatter;
    scatter.kind = CommNodeKind::ReduceScatter;
    scatter.ranks = {0, 1};
    scatter.bytes = 24;
    scatter.chunks = {box({0, 0}, {2, 3}), box({2, 0}, {3, 3})};
    EXPECT_EQ(read_comm_attrs(node(scatter), 2), scatter);

    CommAttrs moves;
    moves.kind = CommNodeKind::Redistribute;
    moves.world = 4;
    moves.bytes = 16;
    moves.sends = {{3, box({0, 0}, {1, 4})}};
    moves.recvs = {{1, box({1, 0}, {2, 4})}, {2, box({2, 0}, {3, 4})}};
    moves.local = {{box({1, 0}, {2, 4}), {0, 0}}};
    EXPECT_EQ(read_comm_attrs(node(moves), 2), moves);
}

// The packing, spelled out: what a graph file holds.
TEST(CommAttrs, WritesTheDocumentedIntegers) {
    CommAttrs moves;
    moves.kind = CommNodeKind::Redistribute;
    moves.world = 2;
    moves.bytes = 8;
    moves.sends = {{1, box({0}, {2})}};
    moves.local = {{box({2}, {4}), {0}}};
    const Attrs a = comm_attrs_to(moves);
    EXPECT_EQ(std::get<std::string>(a.values().at("comm")), "redistribute");
    EXPECT_EQ(a.get_ints("t", "sends"), (std::vector<int64_t>{1, 0, 2}));
    EXPECT_EQ(a.get_ints("t", "local"), (std::vector<int64_t>{2, 4, 0}));
    EXPECT_EQ(a.get_int("t", "world"), 2);
    CommAttrs sum;
    sum.ranks = {0, 1};
    EXPECT_FALSE(comm_attrs_to(sum).has("reduce"));  // a sum is the default
}

TEST(CommAttrs, MalformedAttributesNameTheNode) {
    OpCall c{kCommCarrierKind, "c7:w", {}};
    expect_error([&] { read_comm_attrs(c, 1); }, "communication node 'c7:w' has no string attribute 'comm'");
    c.attrs.set("comm", std::string("gather"));
    expect_error([&] { read_comm_attrs(c, 1); }, "unknown kind 'gather'");
    CommAttrs all;
    all.ranks = {0, 1};
    OpCall r = node(all);
    r.attrs.set("reduce", std::string("min"));
    expect_error([&] { read_comm_attrs(r, 1); }, "attribute 'reduce' must be \"sum\" or \"max\"");
    CommAttrs scatter;
    scatter.kind = CommNodeKind::ReduceScatter;
    scatter.ranks = {0, 1, 2};
    scatter.chunks = {box({0}, {1}), box({1}, {2})};
    expect_error([&] { read_comm_attrs(node(scatter), 1); }, "'chunks' needs 6 integers, has 4");
    CommAttrs moves;
    moves.kind = CommNodeKind::Redistribute;
    moves.world = 2;
    OpCall m = node(moves);
    m.attrs.set("sends", std::vector<int64_t>{1, 0});
    expect_error([&] { read_comm_attrs(m, 1); }, "'sends' has 2 integers, not a multiple of 3");
}

}  // namespace
}  // namespace tessera
