#include "tessera/graph/box.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "tessera/error.h"

namespace tessera {

Box Box::whole(const Shape &s) {
    Box b;
    b.lo.assign(s.size(), 0);
    b.hi.assign(s.begin(), s.end());
    return b;
}

int64_t Box::elements() const {
    int64_t n = 1;
    for (size_t d = 0; d < lo.size(); d++) n *= std::max<int64_t>(hi[d] - lo[d], 0);
    return n;
}

Shape Box::extents() const {
    Shape s(lo.size());
    for (size_t d = 0; d < lo.size(); d++) s[d] = std::max<int64_t>(hi[d] - lo[d], 0);
    return s;
}

bool Box::empty() const {
    for (size_t d = 0; d < lo.size(); d++)
        if (hi[d] <= lo[d]) return true;
    return false;
}

bool Box::contains(const Box &b) const {
    for (size_t d = 0; d < lo.size(); d++)
        if (b.lo[d] < lo[d] || b.hi[d] > hi[d]) return false;
    return true;
}

Box Box::intersect(const Box &b) const {
    Box r = *this;
    for (size_t d = 0; d < lo.size(); d++) {
        r.lo[d] = std::max(lo[d], b.lo[d]);
        r.hi[d] = std::max(r.lo[d], std::min(hi[d], b.hi[d]));
    }
    return r;
}

Box Box::shifted(const Box &origin) const {
    Box r = *this;
    for (size_t d = 0; d < lo.size(); d++) {
        r.lo[d] -= origin.lo[d];
        r.hi[d] -= origin.lo[d];
    }
    return r;
}

int64_t block_lo(int64_t extent, int k, int p) { return p * (extent / k) + std::min<int64_t>(p, extent % k); }

int64_t block_size(int64_t extent, int k, int p) { return extent / k + (p < extent % k ? 1 : 0); }

Box Box::part(int dim, int k, int p) const {
    const int64_t extent = hi[dim] - lo[dim];
    TESSERA_CHECK(k >= 1 && extent >= k, "cannot split extent ", extent, " of dimension ", dim, " of box ", str(),
                  " into ", k, " parts");
    Box b = *this;
    b.lo[dim] += block_lo(extent, k, p);
    b.hi[dim] = b.lo[dim] + block_size(extent, k, p);
    return b;
}

std::string Box::str() const {
    std::ostringstream os;
    os << "[";
    for (size_t d = 0; d < lo.size(); d++) os << (d ? ", " : "") << lo[d] << ":" << hi[d];
    os << "]";
    return os.str();
}

void copy_box(const void *src, const Box &from, void *dst, const Box &to, const Box &region, size_t elem) {
    const int r = region.rank();
    TESSERA_INTERNAL_ASSERT(from.rank() == r && to.rank() == r, "copy_box: ranks differ");
    TESSERA_INTERNAL_ASSERT(from.contains(region) && to.contains(region), "copy_box: region ", region.str(),
                            " is not inside ", from.str(), " and ", to.str());
    if (region.empty()) return;
    if (r == 0) {
        std::memcpy(dst, src, elem);
        return;
    }
    // Row-major strides of both buffers; the innermost dimension is copied as
    // one run.
    std::vector<int64_t> fs(r, 1), ts(r, 1);
    for (int d = r - 2; d >= 0; d--) {
        fs[d] = fs[d + 1] * (from.hi[d + 1] - from.lo[d + 1]);
        ts[d] = ts[d + 1] * (to.hi[d + 1] - to.lo[d + 1]);
    }
    const int64_t run = (region.hi[r - 1] - region.lo[r - 1]) * static_cast<int64_t>(elem);
    std::vector<int64_t> idx(region.lo.begin(), region.lo.end());
    const auto *s = static_cast<const std::byte *>(src);
    auto *t = static_cast<std::byte *>(dst);
    while (true) {
        int64_t so = 0, to_off = 0;
        for (int d = 0; d < r; d++) {
            so += (idx[d] - from.lo[d]) * fs[d];
            to_off += (idx[d] - to.lo[d]) * ts[d];
        }
        std::memcpy(t + to_off * elem, s + so * elem, run);
        int d = r - 2;
        for (; d >= 0; d--) {
            if (++idx[d] < region.hi[d]) break;
            idx[d] = region.lo[d];
        }
        if (d < 0) break;
    }
}

std::vector<int64_t> box_ints(const Box &b) {
    std::vector<int64_t> v(b.lo);
    v.insert(v.end(), b.hi.begin(), b.hi.end());
    return v;
}

Box box_from_ints(const std::vector<int64_t> &v, size_t at, int rank) {
    TESSERA_CHECK(at + 2 * static_cast<size_t>(rank) <= v.size(), "a box list is too short: needs ",
                  at + 2 * rank, " integers, has ", v.size());
    Box b;
    b.lo.assign(v.begin() + at, v.begin() + at + rank);
    b.hi.assign(v.begin() + at + rank, v.begin() + at + 2 * rank);
    return b;
}

}  // namespace tessera
