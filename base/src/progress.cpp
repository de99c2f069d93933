#include "tessera/progress.h"

#include <unistd.h>

#include <algorithm>
#include <iostream>

namespace tessera {

bool stderr_is_terminal() { return isatty(STDERR_FILENO) != 0; }

ProgressLine::ProgressLine(bool redraw, double every_s, std::ostream &plain)
    : redraw_(redraw),
      every_(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(every_s))),
      plain_(plain) {}

bool ProgressLine::show(const std::string &text, bool force) {
    const auto now = Clock::now();
    if (!force && shown_ && now - last_ < every_) return false;
    last_ = now;
    shown_ = true;
    if (redraw_) {
        // The trailing spaces clear what a longer previous text left.
        std::cerr << "\r" << text << "   " << std::flush;
        drawn_ = true;
    } else {
        plain_ << text << "\n" << std::flush;
    }
    return true;
}

void ProgressLine::finish() {
    if (drawn_) std::cerr << "\n" << std::flush;
    drawn_ = false;
}

std::string progress_bar(int64_t done, int64_t total, int width) {
    const int64_t clamped = std::clamp<int64_t>(done, 0, std::max<int64_t>(total, 1));
    const int filled = static_cast<int>(width * clamped / std::max<int64_t>(1, total));
    std::string bar(filled, '=');
    if (filled < width) bar += '>' + std::string(width - filled - 1, ' ');
    return "[" + bar + "]";
}

}  // namespace tessera
