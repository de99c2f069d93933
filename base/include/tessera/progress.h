// Progress of long work (training steps, the swap search, profiling) as one
// line: on a terminal, one line of stderr rewritten in place ("\r"); in a log
// or CI output, plain lines, fewer of them, so that the log stays readable.
// Each program decides what the line says and how often it may change; this
// class only draws it.
#pragma once

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <string>

namespace tessera {

// Whether stderr is a terminal (where progress lines are redrawn).
bool stderr_is_terminal();

class ProgressLine {
public:
    // `redraw`: rewrite one line of stderr in place; otherwise each shown text
    // is a line of its own on `plain`. `every_s`: the least time between two
    // shown texts (the first is shown at once).
    ProgressLine(bool redraw, double every_s, std::ostream &plain);
    ~ProgressLine() { finish(); }
    ProgressLine(const ProgressLine &) = delete;
    ProgressLine &operator=(const ProgressLine &) = delete;

    // Shows `text` if `every_s` has passed since the last shown text, or if
    // `force` (the last step). Returns whether it did.
    bool show(const std::string &text, bool force = false);
    // Ends a redrawn line with a newline, so the next output starts clean.
    void finish();

private:
    using Clock = std::chrono::steady_clock;
    bool redraw_;
    Clock::duration every_;
    std::ostream &plain_;
    Clock::time_point last_{};
    bool shown_ = false;
    bool drawn_ = false;
};

// "[=========>          ]": `done` of `total` in a bar `width` characters wide.
std::string progress_bar(int64_t done, int64_t total, int width = 30);

}  // namespace tessera
