// Operator descriptions in Halide: the single definition of what every Tessera
// operator means. Build-time only: this header includes Halide.h and is used by the
// two build tools (tools/kernelc.cpp, tools/strategyc.cpp), never by the runtime.
//
// A description is a function `OpDef define(Ctx &)`. It asks the context for its
// inputs, their extents and its scalar attributes, and returns its output Funcs.
// The same function runs in two contexts:
//   * the strategy analysis, where inputs are placeholders, extents and attributes
//     are symbols, and Halide's bounds inference derives the partition strategies;
//   * the kernel compiler, where inputs are buffers and attributes are Params, and
//     the description's schedule (guarded by `c.scheduling()`) is applied.
//
// Naming is part of the description. A pure Var named "n" and an RDom dimension
// named "n" are the same index variable: splitting "n" splits both. That is how
// batch norm's statistics (a reduction over the batch) are seen to need a
// cross-device reduction when the batch is split. Halide allows one RDom per
// definition, so build multi-dimensional ones with reduction(), which names each
// dimension.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <Halide.h>

#include "tessera/lang/op.h"

namespace tessera::lang::defs {

// Structural attributes: those that change the loop structure (rank, axis,
// transposes). They are plain ints in both contexts; a variant fixes them.
using StructMap = std::map<std::string, int>;

enum class Boundary {
    None,   // never read outside its extent
    Zero,   // reads outside the extent give 0 (padding)
    Lowest, // reads outside give the lowest float (max pooling's padding)
    Clamp,  // reads outside repeat the edge; for schedules that over-compute a
            // tile whose extra results are never stored (results are unchanged)
};

class Ctx {
public:
    explicit Ctx(StructMap structural) : structural_(std::move(structural)) {}
    virtual ~Ctx() = default;

    // Input i as a Func in Halide order (innermost dimension first).
    virtual Halide::Func input(int i, Halide::Type t, int rank, Boundary b = Boundary::None) = 0;
    // Extent of input i along its Tessera (row-major) dimension d.
    virtual Halide::Expr extent(int i, int d) = 0;
    // A scalar attribute; the name is the attribute's name in Attrs.
    virtual Halide::Expr param_int(const std::string &name) = 0;
    virtual Halide::Expr param_float(const std::string &name) = 0;
    // True when compiling a kernel: the description may then schedule itself.
    virtual bool scheduling() const = 0;
    virtual const Halide::Target &target() const = 0;

    // Staged execution (an operator split at its cross-device reductions).
    // A description passes each reduction stage through stage() right after
    // defining it and uses the result from then on: stage("sum_x") in a
    // kernel that runs after sum_x was all-reduced reads the reduced buffer
    // instead of computing it. Descriptions call stage() in dependency order.
    virtual Halide::Func stage(Halide::Func f) { return f; }
    // The extent of input i along dimension d in the whole (unsplit) tensor:
    // what a mean divides by. Equal to extent() except in staged kernels, which
    // run on one block of the tensor.
    virtual Halide::Expr whole_extent(int i, int d) { return extent(i, d); }
    // Where the block of input i starts along dimension d in the whole tensor
    // (0 except in staged kernels): for indices compared with data (labels).
    virtual Halide::Expr origin(int, int) { return 0; }

    int structural(const std::string &name) const;
    const StructMap &structurals() const { return structural_; }

private:
    StructMap structural_;
};

struct OpDef {
    std::vector<Halide::Func> outputs;
    // Extents of each output in Tessera order, as expressions of the inputs'
    // extents and attributes. The analysis uses them for the range of each var.
    std::vector<std::vector<Halide::Expr>> output_extents;
};

struct KernelVariant {
    std::string suffix;     // kernel name: "tk_<op>_<suffix>"
    StructMap structural;
};

struct Description {
    OpKind op;
    OpDef (*define)(Ctx &);
    std::vector<StructMap> analysis_variants;
    std::vector<KernelVariant> kernels;
};

// All descriptions, in ops.def order.
const std::vector<Description> &descriptions();

// Helpers shared by descriptions.
// Vars named after Tessera dimensions of a rank-r tensor, in Halide order:
// vars(3) = {d2, d1, d0}. Element-wise descriptions use these.
std::vector<Halide::Var> dim_vars(int rank, const std::string &prefix = "d");
// An RDom over [0, extent) per entry, each dimension named for the analysis.
Halide::RDom reduction(const std::vector<std::pair<std::string, Halide::Expr>> &dims);
// The index-variable name of an RVar made by reduction() (or by RDom(min, extent, name)).
std::string rvar_dim_name(const std::string &rvar_name);
// The extents of input i (Tessera order): the output extents of shape-preserving operators.
std::vector<Halide::Expr> extents_of(Ctx &c, int input, int rank);
// An OpDef with the single output y, shaped like input 0 (rank `rank`).
OpDef shaped_like_input(Ctx &c, Halide::Func y, int rank);
// The CPU schedule of a row-wise operator (softmax, layer norm): `out`'s innermost
// dimension vectorised, rows in parallel blocks of 4; per-row reductions and
// per-element temporaries computed inside each row.
void schedule_rows(Halide::Func out, const std::vector<Halide::Func> &per_row,
                   const std::vector<Halide::Func> &per_elem, const Halide::Target &t);
// Convert a list of Vars to the Expr list a call takes.
std::vector<Halide::Expr> as_exprs(const std::vector<Halide::Var> &v);
// The standard CPU schedule for an element-wise Func of any rank: vectorize the
// innermost dimension, parallelise the outermost.
void schedule_elementwise(Halide::Func f, const Halide::Target &t);

// Family registration (one per lang/defs/<family>.cpp).
void register_matmul(std::vector<Description> &out);
void register_elementwise(std::vector<Description> &out);
void register_softmax(std::vector<Description> &out);
void register_norm(std::vector<Description> &out);
void register_conv(std::vector<Description> &out);
void register_layout(std::vector<Description> &out);
void register_misc(std::vector<Description> &out);
void register_optim(std::vector<Description> &out);

}  // namespace tessera::lang::defs
