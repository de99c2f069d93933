// html_page and its pieces: one self-contained page with the shared
// stylesheet, text escaped everywhere and HTML arguments copied as they are.
#include <gtest/gtest.h>

#include "tessera/html_page.h"

namespace tessera {
namespace {

size_t count(const std::string &hay, const std::string &needle) {
    size_t n = 0;
    for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) ++n;
    return n;
}

TEST(HtmlPage, IsOneSelfContainedPage) {
    const std::string page = html_page("a<b", "plan & more", "<code>x</code>", "<p>body</p>\n");
    EXPECT_EQ(page.rfind("<!DOCTYPE html>\n", 0), 0u);
    EXPECT_NE(page.find("<title>a&lt;b</title>"), std::string::npos);
    EXPECT_NE(page.find("<body>\n<h1>plan &amp; more</h1>\n<p class=\"sub\"><code>x</code></p>\n<p>body</p>\n"
                        "</body>\n</html>\n"),
              std::string::npos)
        << page;
    EXPECT_EQ(count(page, "<style>"), 1u);
    EXPECT_NE(page.find(html_page_css()), std::string::npos);
    EXPECT_EQ(page.find("<script"), std::string::npos);
    EXPECT_EQ(page.find("http"), std::string::npos);  // nothing fetched
}

TEST(HtmlPage, CompactLookNamesTheBodyClass) {
    const std::string page = html_page("t", "h", "", "", PageLook::Compact);
    EXPECT_NE(page.find("<body class=\"compact\">\n<h1>h</h1>"), std::string::npos) << page;
}

TEST(HtmlPage, StylesheetDefinesTheClassesThePiecesUse) {
    const std::string &css = html_page_css();
    for (const char *rule : {"td.n, th.n {", ".swatch {", "table.facts th {", "body.compact {", ".sub {",
                             ".tessera-swap th, .tessera-swap td {"})
        EXPECT_NE(css.find(rule), std::string::npos) << rule;
}

TEST(HtmlPage, TablesEscapeTheirCells) {
    EXPECT_EQ(html_table({{"name"}, {"bytes", true}}, {{{"a<b", false, "#a6cee3"}, {"1.50 KiB", true}}, {{"c"}}}),
              "<table>\n<thead><tr><th>name</th><th class=\"n\">bytes</th></tr></thead>\n<tbody>\n"
              "<tr><td><span class=\"swatch\" style=\"background:#a6cee3\"></span>a&lt;b</td>"
              "<td class=\"n\">1.50 KiB</td></tr>\n"
              "<tr><td>c</td></tr>\n</tbody>\n</table>\n");
    EXPECT_EQ(html_facts({{"budget", "64.0 KiB"}, {"a & b", "<1>"}}),
              "<table class=\"facts\">\n<tr><th>budget</th><td>64.0 KiB</td></tr>\n"
              "<tr><th>a &amp; b</th><td>&lt;1&gt;</td></tr>\n</table>\n");
}

TEST(HtmlPage, HeadingsParagraphsAndDetails) {
    EXPECT_EQ(html_h2("Swapping (a<b)"), "<h2>Swapping (a&lt;b)</h2>\n");
    EXPECT_EQ(html_paragraph("1 & 2"), "<p>1 &amp; 2</p>\n");
    EXPECT_EQ(html_details("All 3 steps", "<table></table>\n"),
              "<details><summary>All 3 steps</summary>\n<table></table>\n</details>\n");
}

}  // namespace
}  // namespace tessera
