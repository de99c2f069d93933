#include "strategy_json.h"

#include <sstream>

#include "tessera/error.h"

namespace tessera {

using nlohmann::json;

std::string variant_key(OpKind op, const StructMap &structural) {
    std::string s = op_name(op);
    s += "[";
    bool first = true;
    for (const auto &[k, v] : structural) {
        s += (first ? "" : ",") + k + "=" + std::to_string(v);
        first = false;
    }
    return s + "]";
}

int64_t SymPoly::eval(const SymEnv &env) const {
    int64_t total = 0;
    for (const Monomial &m : terms) {
        int64_t v = m.coef;
        for (const std::string &s : m.syms) {
            auto it = env.find(s);
            TESSERA_INTERNAL_ASSERT(it != env.end(), "strategy symbol '", s, "' is not bound");
            v *= it->second;
        }
        total += v;
    }
    return total;
}

std::string SymPoly::str() const {
    if (terms.empty()) return "0";
    std::ostringstream os;
    bool first = true;
    for (const Monomial &m : terms) {
        int64_t c = m.coef;
        if (!first) os << (c < 0 ? " - " : " + ");
        else if (c < 0) os << "-";
        int64_t a = c < 0 ? -c : c;
        bool printed = false;
        if (a != 1 || m.syms.empty()) {
            os << a;
            printed = true;
        }
        for (const std::string &s : m.syms) {
            os << (printed ? "*" : "") << s;
            printed = true;
        }
        first = false;
    }
    return os.str();
}

json to_json(const SymPoly &p) {
    json j = json::array();
    for (const Monomial &m : p.terms) j.push_back(json::array({m.coef, m.syms}));
    return j;
}

SymPoly poly_from_json(const json &j) {
    SymPoly p;
    for (const json &t : j) p.terms.push_back({t.at(0).get<int64_t>(), t.at(1).get<std::vector<std::string>>()});
    return p;
}

json to_json(const OpStrategies &s) {
    json strategies = json::array();
    for (const Strategy &st : s.strategies) {
        json ins = json::array(), outs = json::array(), reds = json::array();
        for (const InputNeed &n : st.inputs) {
            if (n.kind == NeedKind::Replicated) {
                ins.push_back({{"kind", "replicated"}});
            } else {
                json ji = {{"kind", "split"}, {"dim", n.dim}, {"scale", to_json(n.scale)},
                           {"lo_offset", to_json(n.lo_offset)}, {"hi_offset", to_json(n.hi_offset)},
                           {"halo", to_json(n.halo)}};
                if (n.divisor != InputNeed{}.divisor) ji["divisor"] = to_json(n.divisor);
                ins.push_back(std::move(ji));
            }
        }
        for (const OutputResult &o : st.outputs) {
            if (o.kind == OutKind::Split) outs.push_back({{"kind", "split"}, {"dim", o.dim}});
            else if (o.kind == OutKind::Partial) outs.push_back({{"kind", "partial"}, {"reduce", o.reduce}});
            else outs.push_back({{"kind", "replicated"}});
        }
        for (const StageReduction &r : st.reductions)
            reds.push_back({{"stage", r.stage},
                            {"reduce", r.reduce},
                            {"elements", to_json(r.elements)},
                            {"element_bytes", r.element_bytes}});
        strategies.push_back({{"var", st.var}, {"reduction_var", st.reduction_var}, {"inputs", ins},
                              {"outputs", outs}, {"reductions", reds}});
    }
    json rejected = json::array();
    for (const auto &[v, why] : s.rejected) rejected.push_back(json::array({v, why}));
    return {{"variant", s.variant},       {"opaque", s.opaque},     {"strategies", strategies},
            {"rejected", rejected},        {"stages", s.stages}};
}

OpStrategies op_strategies_from_json(const json &j) {
    OpStrategies s;
    s.variant = j.at("variant").get<std::string>();
    s.opaque = j.at("opaque").get<bool>();
    for (const json &js : j.at("strategies")) {
        Strategy st;
        st.var = js.at("var").get<std::string>();
        st.reduction_var = js.at("reduction_var").get<bool>();
        for (const json &ji : js.at("inputs")) {
            InputNeed n;
            if (ji.at("kind") == "split") {
                n.kind = NeedKind::Split;
                n.dim = ji.at("dim").get<int>();
                n.scale = poly_from_json(ji.at("scale"));
                n.lo_offset = poly_from_json(ji.at("lo_offset"));
                n.hi_offset = poly_from_json(ji.at("hi_offset"));
                n.halo = poly_from_json(ji.at("halo"));
                if (ji.contains("divisor")) n.divisor = poly_from_json(ji.at("divisor"));
            }
            st.inputs.push_back(n);
        }
        for (const json &jo : js.at("outputs")) {
            OutputResult o;
            std::string kind = jo.at("kind").get<std::string>();
            if (kind == "split") {
                o.kind = OutKind::Split;
                o.dim = jo.at("dim").get<int>();
            } else if (kind == "partial") {
                o.kind = OutKind::Partial;
                o.reduce = jo.at("reduce").get<std::string>();
            }
            st.outputs.push_back(o);
        }
        for (const json &jr : js.at("reductions"))
            st.reductions.push_back({jr.at("stage").get<std::string>(), jr.at("reduce").get<std::string>(),
                                     poly_from_json(jr.at("elements")), jr.value("element_bytes", 4)});
        s.strategies.push_back(std::move(st));
    }
    for (const json &r : j.at("rejected")) s.rejected.emplace_back(r.at(0).get<std::string>(), r.at(1).get<std::string>());
    if (j.contains("stages")) s.stages = j.at("stages").get<std::vector<std::string>>();
    return s;
}

std::string strategy_str(const Strategy &s) {
    std::ostringstream os;
    os << "split " << s.var << (s.reduction_var ? " (reduction)" : "") << ": ";
    for (size_t i = 0; i < s.inputs.size(); i++) {
        const InputNeed &n = s.inputs[i];
        os << (i ? ", " : "") << "in" << i << " ";
        if (n.kind == NeedKind::Replicated) {
            os << "replicated";
        } else {
            os << "split d" << n.dim;
            std::string h = n.halo.str();
            if (h != "0") os << " halo " << h;
            if (n.divisor != InputNeed{}.divisor) os << " rows (" << n.scale.str() << ")/(" << n.divisor.str() << ")";
        }
    }
    os << " -> ";
    for (size_t i = 0; i < s.outputs.size(); i++) {
        const OutputResult &o = s.outputs[i];
        os << (i ? ", " : "") << "out" << i << " ";
        if (o.kind == OutKind::Split) os << "split d" << o.dim;
        else if (o.kind == OutKind::Partial) os << "partial " << o.reduce;
        else os << "replicated";
    }
    for (const StageReduction &r : s.reductions) os << "; all-reduce(" << r.reduce << ") " << r.stage;
    return os.str();
}

}  // namespace tessera
