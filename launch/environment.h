// What `--version` and `--env` print: the versions of Tessera and of the
// libraries it runs on, the target its CPU kernels were compiled for, the
// GPUs, the CPUs and the launcher. A bug report quotes --env, so everything
// here answers without a GPU, without MPI running and without a job.
#pragma once

#include <string>

namespace tessera {

// "tessera-train 0.1.0 (git 5eea02f)"
std::string version_line(const std::string &program);

// One "name: value" line per component, ending with a newline. `threads_flag`
// is --threads (0: not given), to show the thread budget a lone process gets.
std::string environment_report(int threads_flag);

}  // namespace tessera
