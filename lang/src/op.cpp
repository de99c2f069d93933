#include "tessera/lang/op.h"

#include <sstream>

#include "family.h"

namespace tessera {

namespace {

const std::vector<OpInfo> kOps = {
#define TESSERA_OP(id, name, family, min_in, max_in, outs) \
    OpInfo{OpKind::id, name, #family, min_in, max_in, outs},
#include "tessera/lang/ops.def"
#undef TESSERA_OP
};

}  // namespace

const std::vector<OpInfo> &all_ops() { return kOps; }

const OpInfo &op_info(OpKind k) {
    size_t i = static_cast<size_t>(k);
    TESSERA_INTERNAL_ASSERT(i < kOps.size(), "bad OpKind ", i);
    return kOps[i];
}

OpKind op_from_name(const std::string &name) {
    for (const OpInfo &o : kOps)
        if (name == o.name) return o.kind;
    std::ostringstream valid;
    for (size_t i = 0; i < kOps.size(); i++) valid << (i ? ", " : "") << kOps[i].name;
    fail("unknown operator '", name, "'; valid operators are: ", valid.str());
}

bool op_may_overwrite_input(OpKind k, int input) {
    if (input < 0 || input >= op_info(k).max_inputs) return false;
    if (k == OpKind::BiasAdd) return input == 0;  // not over the bias
    if (k == OpKind::BiasAddGrad) return false;   // a sum over rows
    return k == OpKind::Dropout || std::string(op_info(k).family) == "elementwise";
}

bool input_stays_f32(OpKind k, int input) {
    return (k == OpKind::SoftmaxXentGrad && input == 2) || (k == OpKind::BatchNormStats && input >= 1);
}

bool output_stays_f32(OpKind k, int) { return k == OpKind::SoftmaxXent || k == OpKind::BatchNormStats; }

bool has_storage_forms(OpKind k) { return k != OpKind::Cast && std::string(op_info(k).family) != "optim"; }

std::string OpCall::who() const {
    std::string s = op_name(kind);
    if (!name.empty()) s += " '" + name + "'";
    return s;
}

namespace lang {

std::string input_label(int i, const char *what) {
    return detail::concat("input ", i, " (", what, ")");
}

void expect_dtype(const OpCall &c, const std::vector<TensorType> &in, int i, const char *what, DType t) {
    TESSERA_CHECK(in[i].dtype == t, c.who(), ": ", input_label(i, what), " must be ", dtype_name(t),
                  ", got ", type_str(in[i]));
}

void expect_rank(const OpCall &c, const std::vector<TensorType> &in, int i, const char *what, int rank) {
    TESSERA_CHECK(in[i].rank() == rank, c.who(), ": ", input_label(i, what), " must have rank ", rank,
                  ", got shape ", shape_str(in[i].shape));
}

void expect_rank_between(const OpCall &c, const std::vector<TensorType> &in, int i, const char *what,
                         int lo, int hi) {
    TESSERA_CHECK(in[i].rank() >= lo && in[i].rank() <= hi, c.who(), ": ", input_label(i, what),
                  " must have rank ", lo, " to ", hi, ", got shape ", shape_str(in[i].shape));
}

void expect_same_shape(const OpCall &c, const std::vector<TensorType> &in, int i, int j) {
    TESSERA_CHECK(in[i].shape == in[j].shape, c.who(), ": input ", i, " has shape ",
                  shape_str(in[i].shape), " but input ", j, " has shape ", shape_str(in[j].shape),
                  "; they must match");
}

int normalize_axis(const OpCall &c, int64_t axis, int rank, const char *attr) {
    int64_t a = axis < 0 ? axis + rank : axis;
    TESSERA_CHECK(a >= 0 && a < rank, c.who(), ": attribute '", attr, "' = ", axis,
                  " is out of range for rank ", rank, " (valid: ", -rank, " to ", rank - 1, ")");
    return static_cast<int>(a);
}

int64_t int_at_least(const OpCall &c, const char *name, int64_t fallback, int64_t lo) {
    int64_t v = c.attrs.get_int(c.who(), name, fallback);
    TESSERA_CHECK(v >= lo, c.who(), ": attribute '", name, "' = ", v, " must be at least ", lo);
    return v;
}

int64_t int_at_least(const OpCall &c, const char *name, int64_t lo) {
    int64_t v = c.attrs.get_int(c.who(), name);
    TESSERA_CHECK(v >= lo, c.who(), ": attribute '", name, "' = ", v, " must be at least ", lo);
    return v;
}

int64_t extent_product(const Shape &s, int begin, int end) {
    int64_t p = 1;
    for (int i = begin; i < end; i++) p *= s[i];
    return p;
}

}  // namespace lang
}  // namespace tessera
