// Internal: what each operator family provides to the generic layer (op.cpp,
// strategy.cpp, kernels.cpp). One lang/src/<family>.cpp per family implements
// shape inference, the structural attributes that select a description variant,
// and kernel dispatch.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tessera/error.h"
#include "tessera/lang/kernels.h"
#include "tessera/lang/op.h"

namespace tessera::lang {

using StructMap = std::map<std::string, int>;

#define TESSERA_DECLARE_FAMILY(f)                                                              \
    std::vector<TensorType> infer_##f(const OpCall &call, const std::vector<TensorType> &in);  \
    StructMap structural_##f(const OpCall &call, const std::vector<TensorType> &in);           \
    void fill_defaults_##f(OpCall &call);                                                      \
    void run_##f(const OpCall &call, const std::vector<TensorRef> &in,                         \
                 const std::vector<TensorRef> &out);

// The one list of families; X(f) is applied to each.
#define TESSERA_FOR_EACH_FAMILY(X) X(matmul) X(elementwise) X(softmax) X(norm) X(conv) X(layout) X(misc) X(optim)

TESSERA_FOR_EACH_FAMILY(TESSERA_DECLARE_FAMILY)
#undef TESSERA_DECLARE_FAMILY

// A family's functions, found by operator.
struct FamilyFns {
    const char *name;
    std::vector<TensorType> (*infer)(const OpCall &, const std::vector<TensorType> &);
    StructMap (*structural)(const OpCall &, const std::vector<TensorType> &);
    void (*fill_defaults)(OpCall &);
    void (*run)(const OpCall &, const std::vector<TensorRef> &, const std::vector<TensorRef> &);
};
const FamilyFns &family_of(OpKind k);

// ---- Validation helpers shared by the families' shape rules. ----
// Each throws tessera::Error naming the operator call and the input.

// "input 0 (x)" style label used in messages.
std::string input_label(int i, const char *what);
void expect_dtype(const OpCall &c, const std::vector<TensorType> &in, int i, const char *what, DType t);
void expect_rank(const OpCall &c, const std::vector<TensorType> &in, int i, const char *what, int rank);
void expect_rank_between(const OpCall &c, const std::vector<TensorType> &in, int i, const char *what,
                         int lo, int hi);
void expect_same_shape(const OpCall &c, const std::vector<TensorType> &in, int i, int j);
// Resolves a possibly negative axis against `rank`; names `attr` when out of range.
int normalize_axis(const OpCall &c, int64_t axis, int rank, const char *attr = "axis");
// Integer attribute that must be >= lo.
int64_t int_at_least(const OpCall &c, const char *name, int64_t fallback, int64_t lo);
int64_t int_at_least(const OpCall &c, const char *name, int64_t lo);  // required

// ---- Kernel invocation (kernels.cpp). ----

// Scalar arguments of a kernel, by the Param names its description used.
struct Scalars {
    std::map<std::string, double> values;
    Scalars &set(const std::string &k, double v) {
        values[k] = v;
        return *this;
    }
    double get(const std::string &k) const;
};

// A tensor argument, optionally viewed with another row-major shape of the same
// element count (element-wise kernels see every tensor as 1-D, for instance).
struct KernelArg {
    TensorRef t;
    Shape view;  // empty: the tensor's own shape
};

// Calls generated kernel `name` ("tk_matmul_nn"), or its storage form
// ("tk_matmul_nn__bf16") when a tensor is bf16 and `storage_form` is true;
// throws InternalError on failure.
void call_kernel(const std::string &name, const std::vector<KernelArg> &in, const Scalars &s,
                 const std::vector<KernelArg> &out, bool storage_form = true);

// The product of shape[begin, end).
int64_t extent_product(const Shape &s, int begin, int end);

}  // namespace tessera::lang
