// Reading environment variables: TESSERA_* tunables, and those that launchers
// and runtimes set (OMPI_COMM_WORLD_*, SLURM_*, OMP_NUM_THREADS, TMPDIR, PATH).
// No code outside base/ calls getenv. Each tunable is declared once, next
// to the code that uses it (TESSERA_LOG in pipeline/stage_log.cpp, TESSERA_GEMM
// in lang/src/matmul.cpp), with its variable, its valid values and its
// default, and read once; these functions only parse. A value that is not
// valid is an error naming the variable and what it accepts, so that a typo
// never silently means the default.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

namespace tessera {

// The raw value of variable `name`, or nothing when it is unset: for values
// that are not a choice (paths, numbers), which the caller parses and, when
// bad, rejects naming the variable.
std::optional<std::string> env_text(const char *name);

// Variable `name` as an int of at least `min`; nothing when unset. Otherwise
// tessera::Error: "environment variable NAME='VALUE' is not an integer >= MIN;
// ADVICE".
std::optional<int> env_int(const char *name, int min, const std::string &advice);

// The value of variable `name`, one of `valid`; `fallback` when it is unset.
// Otherwise tessera::Error: "NAME: unknown WHAT 'VALUE'; valid: a, b".
std::string env_choice(const char *name, const std::vector<std::string> &valid, const std::string &fallback,
                       const std::string &what);

// The comma-separated entries of variable `name` (empty entries skipped), each
// one of `valid`; empty when unset. Errors as env_choice, for the first entry
// that is not valid.
std::set<std::string> env_list(const char *name, const std::vector<std::string> &valid, const std::string &what);

}  // namespace tessera
