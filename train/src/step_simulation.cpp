#include "tessera/train/step_simulation.h"

#include <algorithm>
#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include "tessera/error.h"
#include "tessera/json_input.h"
#include "tessera/partition/lower.h"

namespace tessera {

namespace {

// Every rank's `mine`, in rank order: lengths first, then the bytes padded to the longest.
std::vector<std::string> all_gather_strings(Communicator &comm, const std::string &mine) {
    const int n = comm.size();
    const int64_t length = static_cast<int64_t>(mine.size());
    std::vector<int64_t> lengths(static_cast<size_t>(n));
    comm.all_gather(&length, lengths.data(), sizeof length, comm.world_group());
    const size_t most = static_cast<size_t>(*std::max_element(lengths.begin(), lengths.end()));
    std::string padded = mine;
    padded.resize(most);
    std::string all(most * static_cast<size_t>(n), '\0');
    if (most > 0) comm.all_gather(padded.data(), all.data(), most, comm.world_group());
    std::vector<std::string> out;
    for (int r = 0; r < n; r++) out.push_back(all.substr(static_cast<size_t>(r) * most, static_cast<size_t>(lengths[r])));
    return out;
}

}  // namespace

StepPredictor::StepPredictor(const RunPlan &run, Communicator *comm, int rank) : run_(run), comm_(comm), rank_(rank) {
    const bool sharded = run.sharded() && comm && comm->size() > 1;
    std::vector<std::string> programs = sharded ? all_gather_strings(*comm, program_to_json(run.train).dump())
                                                : std::vector<std::string>{program_to_json(run.train).dump()};
    for (int r = 0; r < static_cast<int>(programs.size()); r++) {
        programs_.push_back(program_from_json(parse_json_input(programs[r], "rank " + std::to_string(r) + "'s program"),
                                             "rank " + std::to_string(r)));
        if (r == rank_ || !sharded) graphs_.push_back(nullptr);
        else graphs_.push_back(std::make_unique<Graph>(lower(run.model.graph, *run.partition, r).graph));
        node_counts_.push_back(static_cast<size_t>((graphs_.back() ? *graphs_.back() : run.graph()).num_nodes()));
    }
    options_.machine = sharded ? run.partition->machine : flat_machine(1);
    // No core-sharing model (StepSimOptions::cores_per_rank stays 0): the
    // stream threads do share the rank's cores, but every time the simulator
    // is fed was measured while they did, the gaps included, so stretching
    // them would count the sharing twice (docs/benchmarks.md).
    if (run.swaps) {
        options_.swap_in_bandwidth = run.swaps->times.h2d_bytes_per_s;
        options_.swap_out_bandwidth = run.swaps->times.d2h_bytes_per_s;
    }
}

std::vector<std::vector<double>> StepPredictor::gather_times(const std::vector<double> &mine) {
    if (programs_.size() == 1) return {mine};
    std::string bytes(reinterpret_cast<const char *>(mine.data()), mine.size() * sizeof(double));
    std::vector<std::vector<double>> out;
    for (const std::string &b : all_gather_strings(*comm_, bytes)) {
        std::vector<double> t(b.size() / sizeof(double));
        std::memcpy(t.data(), b.data(), t.size() * sizeof(double));
        out.push_back(std::move(t));
    }
    return out;
}

StepComparison StepPredictor::predict(const Executor &executor, double my_step_s) {
    std::vector<double> mine = executor.node_times();
    for (const std::vector<double> *t : {&executor.handoff_times(), &executor.transfer_times(), &executor.gap_times()})
        mine.insert(mine.end(), t->begin(), t->end());
    mine.push_back(my_step_s);
    const std::vector<std::vector<double>> times = gather_times(mine);
    StepComparison out;
    std::vector<RankProgram> ranks;
    for (size_t r = 0; r < programs_.size(); r++) {
        const size_t nodes = node_counts_[r], instructions = programs_[r].instructions.size();
        TESSERA_INTERNAL_ASSERT(times[r].size() == nodes + 3 * instructions + 1, "rank ", r, " sent ",
                                times[r].size(), " times for ", nodes, " nodes, three times ", instructions,
                                " instructions and its step");
        out.job_step_s = std::max(out.job_step_s, times[r].back());
        const auto waits = times[r].begin() + static_cast<std::ptrdiff_t>(nodes);
        const auto transfers = waits + static_cast<std::ptrdiff_t>(instructions);
        const auto gaps = transfers + static_cast<std::ptrdiff_t>(instructions);
        RankProgram rp{graphs_[r] ? graphs_[r].get() : &run_.graph(), &programs_[r], {times[r].begin(), waits},
                       {waits, transfers}};
        rp.transfer_s.assign(transfers, gaps);
        rp.gap_s.assign(gaps, times[r].end() - 1);
        ranks.push_back(std::move(rp));
    }
    out.predicted = simulate_step(ranks, options_);
    return out;
}

}  // namespace tessera
