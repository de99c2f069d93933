#include "tessera/graph/comm_attrs.h"

#include "tessera/error.h"

namespace tessera {

namespace {

constexpr const char *kKind = "comm";

std::vector<int64_t> pieces_ints(const std::vector<CommPiece> &pieces) {
    std::vector<int64_t> v;
    for (const CommPiece &p : pieces) {
        v.push_back(p.peer);
        std::vector<int64_t> b = box_ints(p.box);
        v.insert(v.end(), b.begin(), b.end());
    }
    return v;
}

std::vector<int64_t> ints_of(const OpCall &c, const char *name) { return c.attrs.get_ints(c.who(), name); }

// Attribute `name` as whole records of `width` integers.
std::vector<int64_t> records(const OpCall &c, const char *name, size_t width) {
    std::vector<int64_t> v = ints_of(c, name);
    TESSERA_CHECK(width == 0 ? v.empty() : v.size() % width == 0, "communication node '", c.name, "': '", name,
                  "' has ", v.size(), " integers, not a multiple of ", width);
    return v;
}

std::vector<CommPiece> read_pieces(const OpCall &c, const char *name, int r) {
    const size_t width = 1 + 2 * static_cast<size_t>(r);
    std::vector<int64_t> v = records(c, name, width);
    std::vector<CommPiece> out;
    for (size_t at = 0; at < v.size(); at += width)
        out.push_back({static_cast<int>(v[at]), box_from_ints(v, at + 1, r)});
    return out;
}

std::vector<LocalCopy> read_local(const OpCall &c, int r) {
    if (r == 0) return {};
    const size_t width = 3 * static_cast<size_t>(r);
    std::vector<int64_t> v = records(c, "local", width);
    std::vector<LocalCopy> out;
    for (size_t at = 0; at < v.size(); at += width)
        out.push_back({box_from_ints(v, at, r), Shape(v.begin() + static_cast<std::ptrdiff_t>(at + 2 * r),
                                                      v.begin() + static_cast<std::ptrdiff_t>(at + width))});
    return out;
}

CommNodeKind kind_of(const OpCall &c) {
    auto it = c.attrs.values().find(kKind);
    const std::string *kind = it == c.attrs.values().end() ? nullptr : std::get_if<std::string>(&it->second);
    TESSERA_CHECK(kind != nullptr, "communication node '", c.name, "' has no string attribute '", kKind, "'");
    for (CommNodeKind k : {CommNodeKind::AllReduce, CommNodeKind::ReduceScatter, CommNodeKind::Redistribute})
        if (*kind == comm_kind_name(k)) return k;
    fail("communication node '", c.name, "' has unknown kind '", *kind,
         "' (expected redistribute, all_reduce or reduce_scatter)");
}

std::string reduce_of(const OpCall &c) {
    auto it = c.attrs.values().find("reduce");
    if (it == c.attrs.values().end()) return "sum";
    const std::string *how = std::get_if<std::string>(&it->second);
    TESSERA_CHECK(how && (*how == "sum" || *how == "max"), "communication node '", c.name,
                  "': attribute 'reduce' must be \"sum\" or \"max\"");
    return *how;
}

}  // namespace

const char *comm_kind_name(CommNodeKind k) {
    switch (k) {
    case CommNodeKind::AllReduce: return "all_reduce";
    case CommNodeKind::ReduceScatter: return "reduce_scatter";
    case CommNodeKind::Redistribute: return "redistribute";
    }
    TESSERA_INTERNAL_ASSERT(false, "unknown communication kind");
}

Attrs comm_attrs_to(const CommAttrs &c) {
    Attrs a;
    a.set(kKind, std::string(comm_kind_name(c.kind)));
    a.set("bytes", c.bytes);
    if (c.kind == CommNodeKind::Redistribute) {
        a.set("world", int64_t{c.world});
        a.set("sends", pieces_ints(c.sends));
        a.set("recvs", pieces_ints(c.recvs));
        std::vector<int64_t> local;
        for (const LocalCopy &l : c.local) {
            std::vector<int64_t> b = box_ints(l.region);
            local.insert(local.end(), b.begin(), b.end());
            local.insert(local.end(), l.dest.begin(), l.dest.end());
        }
        a.set("local", local);
        return a;
    }
    a.set("ranks", std::vector<int64_t>(c.ranks.begin(), c.ranks.end()));
    if (c.kind == CommNodeKind::AllReduce && c.reduce != "sum") a.set("reduce", c.reduce);
    if (c.kind == CommNodeKind::ReduceScatter) {
        std::vector<int64_t> chunks;
        for (const Box &b : c.chunks) {
            std::vector<int64_t> v = box_ints(b);
            chunks.insert(chunks.end(), v.begin(), v.end());
        }
        a.set("chunks", chunks);
    }
    return a;
}

CommAttrs read_comm_attrs(const OpCall &call, int r) {
    CommAttrs c;
    c.kind = kind_of(call);
    c.bytes = call.attrs.get_int(call.who(), "bytes");
    if (c.kind == CommNodeKind::Redistribute) {
        c.world = static_cast<int>(call.attrs.get_int(call.who(), "world"));
        c.sends = read_pieces(call, "sends", r);
        c.recvs = read_pieces(call, "recvs", r);
        c.local = read_local(call, r);
        return c;
    }
    for (int64_t q : ints_of(call, "ranks")) c.ranks.push_back(static_cast<int>(q));
    if (c.kind == CommNodeKind::AllReduce) {
        c.reduce = reduce_of(call);
        return c;
    }
    const size_t width = 2 * static_cast<size_t>(r);
    std::vector<int64_t> v = records(call, "chunks", width);
    TESSERA_CHECK(v.size() == c.ranks.size() * width, "communication node '", call.name, "': 'chunks' needs ",
                  c.ranks.size() * width, " integers, has ", v.size());
    for (size_t j = 0; j < c.ranks.size(); j++) c.chunks.push_back(box_from_ints(v, j * width, r));
    return c;
}

}  // namespace tessera
