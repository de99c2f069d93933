// The progress bar's text, and ProgressLine's plain lines (the redrawn form
// needs a terminal).
#include <sstream>

#include <gtest/gtest.h>

#include "tessera/progress.h"

namespace tessera {
namespace {

TEST(Progress, ProgressBar) {
    EXPECT_EQ(progress_bar(0, 10, 10), "[>         ]");
    EXPECT_EQ(progress_bar(5, 10, 10), "[=====>    ]");
    EXPECT_EQ(progress_bar(10, 10, 10), "[==========]");
    EXPECT_EQ(progress_bar(20, 10, 10), "[==========]");
    EXPECT_EQ(progress_bar(0, 0, 4), "[>   ]");
}

TEST(Progress, ProgressLineShowsTheFirstLineThenAtMostOneAnInterval) {
    std::ostringstream out;
    {
        ProgressLine line(false, 3600, out);
        EXPECT_TRUE(line.show("first"));
        EXPECT_FALSE(line.show("too soon"));
        EXPECT_TRUE(line.show("forced", true));
        EXPECT_FALSE(line.show("too soon again"));
    }
    EXPECT_EQ(out.str(), "first\nforced\n");
    std::ostringstream every;
    ProgressLine always(false, 0, every);
    EXPECT_TRUE(always.show("a"));
    EXPECT_TRUE(always.show("b"));
    EXPECT_EQ(every.str(), "a\nb\n");
}

}  // namespace
}  // namespace tessera
