// TESSERA_LOG=STAGE[,STAGE...] (or all) prints what each pipeline stage made
// to stderr, one "---- STAGE ----" section per stage. The variable is read
// once; a stage name that no stage has is an error, so that a typo is not
// silently nothing.
#pragma once

#include <string>

namespace tessera {

// The stage names TESSERA_LOG accepts, in pipeline order.
const char *const *log_stage_names();

// Whether TESSERA_LOG asks for `stage`. Throws tessera::Error naming an
// unknown entry of TESSERA_LOG.
bool log_enabled(const std::string &stage);

// Prints `text` under a heading when log_enabled(stage).
void log_stage(const std::string &stage, const std::string &text);

}  // namespace tessera
