// The pieces every HTML page Tessera writes is built from: the page itself,
// with one stylesheet shared by every page, and the headings, paragraphs and
// tables inside it. A page is one file with its style inline, no scripts and
// nothing fetched, so that it can be mailed or opened offline.
//
// Every function here takes plain text and escapes it (html_escape in
// tessera/text.h); a parameter whose name ends in `_html` is already HTML and
// is copied as it is.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "tessera/text.h"

namespace tessera {

// How a page looks. Standard: the plan page's wide layout, light rules under
// rows, text left and numbers right. Compact: a narrow margin, a plain
// sans-serif font and every cell boxed and right-aligned, for pages that are
// mostly charts over one table of numbers.
enum class PageLook { Standard, Compact };

// A whole page: <title>, the stylesheet, an <h1> `heading`, a note under it
// (class "sub"), then `body_html`, closed by "</body>\n</html>\n" (callers
// that add sections later insert them before "</body>").
std::string html_page(const std::string &title, const std::string &heading, const std::string &note_html,
                      const std::string &body_html, PageLook look = PageLook::Standard);

// The stylesheet html_page() puts in every page: the looks above, the plan
// page's cards, bars and swatches, and the swap section's timeline
// (.tessera-swap). A page's classes are all defined here.
const std::string &html_page_css();

// "<h2>text</h2>\n".
std::string html_h2(const std::string &text);

// "<p>text</p>\n".
std::string html_paragraph(const std::string &text);

// A <details> block, folded: the summary line, and `body_html` when opened.
std::string html_details(const std::string &summary, const std::string &body_html);

// One cell of html_table(). A numeric cell is right-aligned with figures of
// equal width; a swatch (a CSS colour) draws a small square of that colour
// before the text, to key the row to a picture.
struct HtmlCell {
    std::string text;
    bool numeric = false;
    std::string swatch = "";
};

// A table: the header in <thead>, the rows in <tbody>.
std::string html_table(const std::vector<HtmlCell> &header, const std::vector<std::vector<HtmlCell>> &rows);

// A table of facts, one per row: the name as a row heading (left-aligned),
// then its value.
std::string html_facts(const std::vector<std::pair<std::string, std::string>> &facts);

}  // namespace tessera
