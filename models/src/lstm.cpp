// lstm: Tofu's RNN benchmark, a stacked LSTM language model unrolled over the
// sequence. Every step of every layer is its own small group of nodes sharing the
// layer's weights, which is what Tofu's coarsening merges back ("unrolled RNN
// timesteps") before its partition search.
//
// Per layer and step t, with x_t the step's input and h, c the running state:
//   gates = x_t Wx + h Wh + b          [batch, 4 * hidden], split as i, f, g, o
//   c = sigmoid(f) * c + sigmoid(i) * tanh(g)
//   h = sigmoid(o) * tanh(c)
// The state starts at zero, so step 0 simply omits the h Wh and f * c terms.
// With seq=1 there is no step after it, so no h Wh at all: the model has no
// recurrent weight Wh (a weight that cannot affect the loss would be one the
// optimizer cannot train), and each layer is one gated feed-forward cell.
#include <optional>

#include "zoo_internal.h"

namespace tessera::zoo {

namespace {

Model build(const Params &p, int64_t batch) {
    const int64_t layers = p.get("layers", 2, 1, 1024);
    const int64_t hidden = p.get("hidden", 256, 1, 1 << 24);
    const int64_t seq = p.get("seq", 16, 1, 65536);
    const int64_t vocab = p.get("vocab", 1000, 2);
    const int64_t embed = p.get("embed", hidden, 1, 1 << 24);
    // Every unrolled cell is at most 21 operators (kMaxOperators).
    constexpr int64_t kMaxCells = kMaxOperators / 21;
    if (layers * seq > kMaxCells)
        p.fail("layers x seq = ", layers, " x ", seq, " = ", layers * seq, " unrolled cells is too many; at most ",
               kMaxCells, " are supported");

    Model m;
    Builder b(m.graph);
    Tensor ids = b.data("input", {batch, seq}, DType::I32);
    Tensor labels = b.data("labels", {batch * seq}, DType::I32);
    Tensor table = b.param("embed", {vocab, embed}, Init::uniform(0.1));
    Tensor embedded = b.embedding(table, ids);  // [batch, seq, embed]

    // The inputs of the current layer, one [batch, width] tensor per step.
    std::vector<Tensor> steps;
    for (int64_t t = 0; t < seq; t++)
        steps.push_back(seq == 1 ? b.reshape(embedded, {batch, embed})
                                 : b.reshape(b.slice(embedded, 1, t, t + 1), {batch, embed}));

    for (int64_t l = 1; l <= layers; l++) {
        auto scope = b.scope(str("lstm", l));
        const int64_t in = steps[0].dim(1);
        Tensor wx = b.param("wx", {in, 4 * hidden}, Init::xavier_uniform(in, 4 * hidden));
        std::optional<Tensor> wh;
        if (seq > 1) wh = b.param("wh", {hidden, 4 * hidden}, Init::xavier_uniform(hidden, 4 * hidden));
        Tensor bias = b.param("b", {4 * hidden}, Init::zeros());
        Tensor h, c;
        for (int64_t t = 0; t < seq; t++) {
            auto step_scope = b.scope(str("t", t));
            Tensor gates = b.matmul(steps[t], wx);
            if (t > 0) gates = b.add(gates, b.matmul(h, *wh));
            gates = b.bias_add(gates, bias);
            auto gate = [&](int k) { return b.slice(gates, 1, k * hidden, (k + 1) * hidden); };
            Tensor i = b.sigmoid(gate(0)), g = b.tanh(gate(2)), o = b.sigmoid(gate(3));
            // Built in a fixed order so that every step names its nodes alike
            // ("t3.mul" is i*g at every t): the partitioner merges timesteps by name.
            Tensor ig = b.mul(i, g);
            if (t == 0) {
                c = ig;
            } else {
                Tensor fc = b.mul(b.sigmoid(gate(1)), c);
                c = b.add(fc, ig);
            }
            h = b.mul(o, b.tanh(c));
            steps[t] = h;
        }
    }

    // Stack the last layer's steps as [batch, seq, hidden] so that row b * seq + t
    // of the logits belongs to token t of sample b.
    std::vector<Tensor> rows;
    for (const Tensor &s : steps) rows.push_back(b.reshape(s, {batch, 1, hidden}));
    Tensor stacked = b.reshape(concat_all(b, rows, 1), {batch * seq, hidden});
    Tensor logits;
    {
        auto scope = b.scope("out");
        logits = b.linear(stacked, vocab, true, Builder::WeightInit::Xavier);
    }
    std::string what =
        str("lstm ", layers, "x", hidden, ", seq ", seq, ", vocab ", vocab, ", embed ", embed);
    finish(m, b, ids, labels, logits, seq, what);
    return m;
}

}  // namespace

const ModelDef &lstm_def() {
    static const ModelDef def{
        "lstm",
        "stacked LSTM language model unrolled over seq steps (Tofu's RNN); input i32 token ids [batch, seq]",
        {{"layers", "2", "number of stacked LSTM layers"},
         {"hidden", "256", "LSTM state size"},
         {"seq", "16", "tokens per sample (unrolled steps); one label per token; with 1, no recurrent weight"},
         {"vocab", "1000", "vocabulary size: token ids and predicted classes (at least 2)"},
         {"embed", "hidden", "token embedding width (by default the LSTM state size)"}},
        build};
    return def;
}

}  // namespace tessera::zoo
