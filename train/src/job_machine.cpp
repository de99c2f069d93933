#include "tessera/train/job_machine.h"

#include <map>

#include <fmt/format.h>

#include "tessera/error.h"
#include "tessera/text.h"

namespace tessera {

namespace {

// Why these placements are not nodes of equal size holding consecutive ranks
// (see the header); empty when they are.
std::string placement_problem(const std::vector<Communicator::Placement> &p) {
    const int ranks = static_cast<int>(p.size()), nodes = p[0].num_nodes;
    std::map<int, int> held;  // node -> its ranks
    for (const Communicator::Placement &q : p) held[q.node]++;
    std::string counts;
    for (const auto &[node, n] : held) counts += fmt::format("{}node {}: {}", counts.empty() ? "" : ", ", node, n);
    bool equal = ranks % nodes == 0 && static_cast<int>(held.size()) == nodes;
    for (const auto &[node, n] : held) equal = equal && n == ranks / nodes;
    if (!equal) return fmt::format("its {} hold different numbers of ranks ({})", count_of(nodes, "node"), counts);
    const int per_node = ranks / nodes;
    for (int r = 0; r < ranks; r++)
        if (p[r].node != r / per_node)
            return fmt::format("rank {} runs on node {}, not node {}: a node's ranks are not consecutive (mpirun "
                               "--map-by slot, or srun --distribution=block, places them so)",
                               r, p[r].node, r / per_node);
    return "";
}

// "2 nodes of 2 ranks (--nodes 2)", "one node (4 ranks)": the job's shape as errors say it.
std::string shape_text(const JobShape &s) {
    std::string declared = s.declared_nodes > 0 ? fmt::format(" (--nodes {})", s.declared_nodes) : "";
    if (!s.flat_why.empty()) return fmt::format("{} planned flat: {}", count_of(s.ranks, "rank"), s.flat_why);
    if (s.nodes == 1) return fmt::format("one node ({}){}", count_of(s.ranks, "rank"), declared);
    return fmt::format("{} of {}{}", count_of(s.nodes, "node"), count_of(s.per_node, "rank"), declared);
}

// Where the machine's shape came from, for the banner.
std::string source_text(const JobShape &s, const std::string &path) {
    std::string from = path.empty() ? "" : "--machine " + path + ", ";
    if (s.declared_nodes > 0)
        return from + fmt::format("--nodes {}: pretend nodes of {} consecutive ranks", s.declared_nodes,
                                  s.per_node);
    return from + "the launch: " + shape_text(s);
}

// --machine FILE, checked against the job: the same devices, and the nodes as
// its outermost level.
Machine machine_for_shape(const JobShape &s, const std::string &path) {
    Machine m = load_machine(path);
    const std::string described = "--machine " + path + " describes " + machine_str(m);
    TESSERA_CHECK(m.devices() == s.ranks, described, ", but this job has ", count_of(s.ranks, "rank"));
    const int outer = m.levels.front().count;
    if (s.nodes > 1)
        TESSERA_CHECK(outer == s.nodes, described, ": ", outer, " at its outermost level, but this job runs on ",
                      shape_text(s), "; describe its nodes as the outermost level");
    else
        TESSERA_CHECK(m.levels.size() == 1 || outer == 1, described, ": ", outer,
                      " at its outermost level, but this job runs on ", shape_text(s),
                      "; to plan on its levels anyway (on one host too), group the ranks into nodes of consecutive "
                      "ranks with --nodes ", outer);
    return m;
}

}  // namespace

std::vector<Communicator::Placement> gather_placements(Communicator *comm) {
    if (!comm || comm->size() == 1) return {comm ? comm->placement() : Communicator::Placement{}};
    std::vector<Communicator::Placement> all(static_cast<size_t>(comm->size()));
    comm->all_gather(&comm->placement(), all.data(), sizeof(Communicator::Placement), comm->world_group());
    return all;
}

JobShape job_shape(const std::vector<Communicator::Placement> &placements, int declared_nodes) {
    TESSERA_INTERNAL_ASSERT(!placements.empty(), "job_shape of no ranks");
    JobShape s;
    s.ranks = static_cast<int>(placements.size());
    s.per_node = s.ranks;
    if (declared_nodes > 0) {
        TESSERA_CHECK(s.ranks % declared_nodes == 0, "--nodes ", declared_nodes, ": the job's ",
                      count_of(s.ranks, "rank"), s.ranks == 1 ? " does" : " do", " not split into ", declared_nodes,
                      " nodes of the same size; give a --nodes that divides ", s.ranks);
        s.declared_nodes = s.nodes = declared_nodes;
        s.per_node = s.ranks / declared_nodes;
        return s;
    }
    if (placements[0].num_nodes == 1) return s;
    s.flat_why = placement_problem(placements);
    if (!s.flat_why.empty()) return s;
    s.nodes = placements[0].num_nodes;
    s.per_node = s.ranks / s.nodes;
    return s;
}

JobMachine job_machine(const JobShape &shape, const std::string &machine_path) {
    JobMachine jm;
    jm.machine = machine_path.empty() ? cluster_machine(shape.nodes, shape.per_node)
                                      : machine_for_shape(shape, machine_path);
    jm.description = fmt::format("machine {} from {} | links {}", machine_str(jm.machine),
                                 source_text(shape, machine_path), machine_links_str(jm.machine));
    return jm;
}

}  // namespace tessera
