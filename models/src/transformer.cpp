// transformer: a decoder-only (GPT-style) language model with pre-norm blocks.
//
//   x = token_embed[ids] + pos_embed             [batch, seq, d_model]
//   per block:  x += proj(attention(layer_norm(x)))
//               x += fc2(gelu(fc1(layer_norm(x))))
//   logits = out(layer_norm(x))                  [batch * seq, vocab]
//
// Attention runs as batched matmuls over [batch * heads, seq, head_dim]; a
// causal mask constant (0 on and below the diagonal, -1e9 above) added to the
// scores keeps every position from seeing later tokens. The residual stream is
// kept as [batch * seq, d_model] so that every linear layer is one matmul.
#include <cmath>

#include "zoo_internal.h"

namespace tessera::zoo {

namespace {

struct Dims {
    int64_t batch, seq, d, heads;
    int64_t dh() const { return d / heads; }
};

Tensor xavier_linear(Builder &b, const std::string &name, Tensor x, int64_t out) {
    auto scope = b.scope(name);
    return b.linear(x, out, true, Builder::WeightInit::Xavier);
}

// [batch * seq, d] -> [batch * heads, seq, dh]
Tensor split_heads(Builder &b, Tensor x, const Dims &n) {
    Tensor t = b.reshape(x, {n.batch, n.seq, n.heads, n.dh()});
    t = b.permute(t, {0, 2, 1, 3});
    return b.reshape(t, {n.batch * n.heads, n.seq, n.dh()});
}

// [batch * heads, seq, dh] -> [batch * seq, d]
Tensor merge_heads(Builder &b, Tensor x, const Dims &n) {
    Tensor t = b.reshape(x, {n.batch, n.heads, n.seq, n.dh()});
    t = b.permute(t, {0, 2, 1, 3});
    return b.reshape(t, {n.batch * n.seq, n.d});
}

Tensor attention(Builder &b, Tensor x, Tensor mask, const Dims &n) {
    auto scope = b.scope("attn");
    Tensor q = split_heads(b, xavier_linear(b, "q", x, n.d), n);
    Tensor k = split_heads(b, xavier_linear(b, "k", x, n.d), n);
    Tensor v = split_heads(b, xavier_linear(b, "v", x, n.d), n);
    Tensor scores = b.scale(b.batch_matmul(q, k, false, true), 1.0 / std::sqrt(static_cast<double>(n.dh())));
    Tensor probs = b.softmax(b.add(scores, mask));
    return xavier_linear(b, "proj", merge_heads(b, b.batch_matmul(probs, v), n), n.d);
}

Tensor layer_norm(Builder &b, const std::string &name, Tensor x) {
    auto scope = b.scope(name);
    return b.layer_norm_layer(x);
}

Model build(const Params &p, int64_t batch) {
    // A block is about 34 operators (kMaxOperators).
    const int64_t layers = p.get("layers", 2, 1, kMaxOperators / 34);
    const int64_t d = p.get("d_model", 128, 1, 1 << 24);
    const int64_t heads = p.get("heads", 4, 1, 1 << 24);
    const int64_t seq = p.get("seq", 32, 1, 65536);
    const int64_t vocab = p.get("vocab", 1000, 2);
    const int64_t ffn = p.get("ffn", 4 * d, 1, int64_t{1} << 26);
    if (d % heads != 0) {
        std::string divisors;
        int64_t k = 1;
        for (; k <= d && divisors.size() < 40; k++)
            if (d % k == 0) divisors += str(divisors.empty() ? "" : ", ", k);
        if (k <= d) divisors += ", ...";
        p.fail("heads = ", heads, " does not divide d_model = ", d, "; each head gets d_model / heads ",
               "channels, so pick heads among the divisors of ", d, " (", divisors, ")");
    }
    const Dims n{batch, seq, d, heads};

    Model m;
    Builder b(m.graph);
    Tensor ids = b.data("input", {batch, seq}, DType::I32);
    Tensor labels = b.data("labels", {batch * seq}, DType::I32);
    Tensor tok = b.param("tok_embed", {vocab, d}, Init::normal(0.02));
    Tensor pos = b.param("pos_embed", {seq, d}, Init::normal(0.02));
    Tensor x = b.add(b.embedding(tok, ids), b.broadcast(pos, 0, batch));
    x = b.reshape(x, {batch * seq, d});

    TensorId mask_id = m.graph.add_constant("causal_mask", TensorType{DType::F32, {seq, seq}},
                                            Init::causal_mask());
    Tensor mask = b.broadcast(Tensor{mask_id, &m.graph}, 0, batch * heads);

    for (int64_t l = 1; l <= layers; l++) {
        auto scope = b.scope(str("block", l));
        x = b.add(x, attention(b, layer_norm(b, "ln1", x), mask, n));
        Tensor h = xavier_linear(b, "fc1", layer_norm(b, "ln2", x), ffn);
        x = b.add(x, xavier_linear(b, "fc2", b.gelu(h), d));
    }
    Tensor logits = xavier_linear(b, "out", layer_norm(b, "ln_f", x), vocab);
    std::string what = str("transformer ", layers, " layers, d_model ", d, ", heads ", heads, ", ffn ", ffn,
                           ", seq ", seq, ", vocab ", vocab);
    finish(m, b, ids, labels, logits, seq, what);
    return m;
}

}  // namespace

const ModelDef &transformer_def() {
    static const ModelDef def{
        "transformer",
        "decoder-only transformer language model (pre-norm, causal attention); input i32 token ids [batch, seq]",
        {{"layers", "2", "number of transformer blocks"},
         {"d_model", "128", "width of the residual stream"},
         {"heads", "4", "attention heads; must divide d_model"},
         {"seq", "32", "tokens per sample (context length); one label per token"},
         {"vocab", "1000", "vocabulary size: token ids and predicted classes (at least 2)"},
         {"ffn", "4*d_model", "hidden width of each block's feed-forward layer"}},
        build};
    return def;
}

}  // namespace tessera::zoo
