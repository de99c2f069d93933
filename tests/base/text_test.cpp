// format_bytes and format_duration: the one style every module prints sizes
// and times in, at each unit boundary; with_commas, strf, TextTable; align_up.
#include <cmath>
#include <limits>
#include <utility>

#include <gtest/gtest.h>

#include "tessera/align.h"
#include "tessera/text.h"

namespace tessera {
namespace {

TEST(Text, BytesHaveThreeSignificantDigits) {
    const std::pair<int64_t, const char *> cases[] = {
        {0, "0 B"},
        {512, "512 B"},
        {1023, "1023 B"},
        {1024, "1.00 KiB"},
        {1536, "1.50 KiB"},
        {3 << 19, "1.50 MiB"},
        {12345678, "11.8 MiB"},
        {200 << 20, "200 MiB"},
        {2LL << 30, "2.00 GiB"},
        {5LL << 40, "5.00 TiB"},
        {-1536, "-1.50 KiB"},
        {std::numeric_limits<int64_t>::max(), "8.00 EiB"},
        {std::numeric_limits<int64_t>::min(), "-8.00 EiB"},
    };
    for (const auto &[bytes, text] : cases) EXPECT_EQ(format_bytes(bytes), text) << bytes;
}

TEST(Text, DurationsHaveThreeSignificantDigitsThenMinutes) {
    const std::pair<double, const char *> cases[] = {
        {0, "0 s"},
        {950e-9, "950 ns"},
        {2e-6, "2.00 us"},
        {12.34e-6, "12.3 us"},
        {1.5e-3, "1.50 ms"},
        {0.143, "143 ms"},
        {0.9996, "1.00 s"},
        {2, "2.00 s"},
        {59, "59.0 s"},
        {245, "4 min 05 s"},
        {2 * 3600 + 3 * 60 + 10, "2 h 03 min"},
        {-0.0015, "-1.50 ms"},
        {std::nan(""), "n/a"},
        {std::numeric_limits<double>::infinity(), "inf"},
    };
    for (const auto &[seconds, text] : cases) EXPECT_EQ(format_duration(seconds), text) << seconds;
}

TEST(Text, CommaListsSplitAndTrim) {
    EXPECT_EQ(split_list("tofu,data"), (std::vector<std::string>{"tofu", "data"}));
    EXPECT_EQ(split_list(" 1, 2 ,\t4 "), (std::vector<std::string>{"1", "2", "4"}));
    EXPECT_EQ(split_list("a,,b,"), (std::vector<std::string>{"a", "", "b", ""}));
    EXPECT_EQ(split_list(""), (std::vector<std::string>{""}));
}

TEST(Text, HtmlEscapeAndJoin) {
    EXPECT_EQ(html_escape("a<b & \"c\" 'd'>"), "a&lt;b &amp; &quot;c&quot; &#39;d&#39;&gt;");
    EXPECT_EQ(join({"a", "b", "c"}, ", "), "a, b, c");
    EXPECT_EQ(join({}, ", "), "");
}

TEST(Text, ThousandsAreSeparatedByCommas) {
    EXPECT_EQ(with_commas(0), "0");
    EXPECT_EQ(with_commas(999), "999");
    EXPECT_EQ(with_commas(1000), "1,000");
    EXPECT_EQ(with_commas(1576036), "1,576,036");
    EXPECT_EQ(with_commas(-1024), "-1,024");
    EXPECT_EQ(with_commas(std::numeric_limits<int64_t>::min()), "-9,223,372,036,854,775,808");
}

TEST(Text, StrfFormatsLikePrintf) {
    EXPECT_EQ(strf("level %zu (%d-way over %s)", size_t{1}, 2, "node"), "level 1 (2-way over node)");
    EXPECT_EQ(strf("%.2fx", 1.5), "1.50x");
    EXPECT_EQ(strf("%s", ""), "");
    EXPECT_EQ(strf("%s", std::string(300, 'a').c_str()), std::string(300, 'a'));
}

TEST(Text, TextTablePadsColumnsAndRightAlignsNumbers) {
    TextTable t({"name", "bytes", "note"}, {false, true});
    t.add({"weights", "1.50 KiB", "x"});
    t.add({"w", "12 B"});  // the missing cell is empty, and no line ends in spaces
    EXPECT_EQ(t.str(), "  name        bytes  note\n"
                       "  weights  1.50 KiB  x\n"
                       "  w            12 B\n");
    EXPECT_EQ(t.str(""), "name        bytes  note\nweights  1.50 KiB  x\nw            12 B\n");
}

TEST(Text, CountsTakeTheirPlural) {
    EXPECT_EQ(count_of(0, "rank"), "0 ranks");
    EXPECT_EQ(count_of(1, "rank"), "1 rank");
    EXPECT_EQ(count_of(7, "node"), "7 nodes");
}

TEST(Align, AlignUp) {
    static_assert(align_up(0, 64) == 0);
    EXPECT_EQ(align_up(1, 64), 64);
    EXPECT_EQ(align_up(64, 64), 64);
    EXPECT_EQ(align_up(65, 64), 128);
    EXPECT_EQ(align_up(1000, 256), 1024);
}

}  // namespace
}  // namespace tessera
