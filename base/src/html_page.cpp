#include "tessera/html_page.h"

namespace tessera {

namespace {

// Rules for elements come first (the Standard look), then the classes pages
// use, then the Compact look, whose rules win by naming the body's class.
constexpr const char *kCss = R"(
body { font-family: system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em auto;
       max-width: 1200px; padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; }
h2 { font-size: 1.15em; margin-top: 2em; border-bottom: 1px solid #ddd; padding-bottom: 0.2em; }
.sub { color: #666; margin-top: 0; }
.cards { display: flex; flex-wrap: wrap; gap: 0.8em; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: 0.6em 0.9em; min-width: 11em; background: #fafafa; }
.card .k { font-size: 0.8em; color: #666; text-transform: uppercase; letter-spacing: 0.03em; }
.card .v { font-size: 1.3em; font-weight: 600; margin: 0.15em 0; }
.card .s { font-size: 0.8em; color: #666; }
table { border-collapse: collapse; font-size: 0.88em; margin: 0.5em 0; }
th, td { border-bottom: 1px solid #eee; padding: 0.25em 0.7em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; position: sticky; top: 0; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.bars { display: grid; grid-template-columns: 12em 1fr 7em; gap: 0.3em 0.8em; align-items: center; max-width: 900px; }
.bars .n { text-align: right; font-variant-numeric: tabular-nums; }
.bar { height: 1.1em; background: #4e79a7; border-radius: 2px; min-width: 1px; }
.bar.one { background: #bab0ac; }
.bar.peak { background: #f28e2b; }
.swatch { display: inline-block; width: 0.8em; height: 0.8em; border-radius: 2px; margin-right: 0.4em; }
ul.notes li { margin: 0.2em 0; }
details summary { cursor: pointer; color: #345; margin: 0.5em 0; }
code { font-size: 0.95em; }
.tessera-swap svg { font: 11px sans-serif; max-width: 100%; height: auto; }
.tessera-swap table { border-collapse: collapse; font-size: 0.88em; }
.tessera-swap th, .tessera-swap td { border-bottom: 1px solid #eee; padding: 0.2em 0.7em; text-align: right; }
.tessera-swap .legend span { display: inline-block; width: 0.8em; height: 0.8em; margin: 0 0.3em 0 1em;
                             border-radius: 2px; }
table.facts th { text-align: left; }
body.compact { font-family: sans-serif; margin: 24px; max-width: none; padding: 0; }
.compact h1 { font-size: 2em; margin-bottom: 0.67em; }
.compact h2 { font-size: 1.5em; margin-top: 0.83em; border-bottom: none; padding-bottom: 0; }
.compact .sub { color: #555; margin-top: 1em; }
.compact table { font-size: 13px; margin: 0; }
.compact th, .compact td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; vertical-align: middle; }
.compact th { position: static; }
)";

std::string cell(const char *tag, const HtmlCell &c) {
    std::string s = std::string("<") + tag + (c.numeric ? " class=\"n\">" : ">");
    if (!c.swatch.empty()) s += "<span class=\"swatch\" style=\"background:" + html_escape(c.swatch) + "\"></span>";
    return s + html_escape(c.text) + "</" + tag + ">";
}

}  // namespace

const std::string &html_page_css() {
    static const std::string css = kCss;
    return css;
}

std::string html_page(const std::string &title, const std::string &heading, const std::string &note_html,
                      const std::string &body_html, PageLook look) {
    std::string s = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
    s += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
    s += "<title>" + html_escape(title) + "</title>\n<style>" + html_page_css() + "</style>\n</head>\n";
    s += look == PageLook::Compact ? "<body class=\"compact\">\n" : "<body>\n";
    s += "<h1>" + html_escape(heading) + "</h1>\n";
    s += "<p class=\"sub\">" + note_html + "</p>\n";
    return s + body_html + "</body>\n</html>\n";
}

std::string html_h2(const std::string &text) { return "<h2>" + html_escape(text) + "</h2>\n"; }

std::string html_paragraph(const std::string &text) { return "<p>" + html_escape(text) + "</p>\n"; }

std::string html_details(const std::string &summary, const std::string &body_html) {
    return "<details><summary>" + html_escape(summary) + "</summary>\n" + body_html + "</details>\n";
}

std::string html_table(const std::vector<HtmlCell> &header, const std::vector<std::vector<HtmlCell>> &rows) {
    std::string s = "<table>\n<thead><tr>";
    for (const HtmlCell &h : header) s += cell("th", h);
    s += "</tr></thead>\n<tbody>\n";
    for (const auto &r : rows) {
        s += "<tr>";
        for (const HtmlCell &c : r) s += cell("td", c);
        s += "</tr>\n";
    }
    return s + "</tbody>\n</table>\n";
}

std::string html_facts(const std::vector<std::pair<std::string, std::string>> &facts) {
    std::string s = "<table class=\"facts\">\n";
    for (const auto &[name, value] : facts)
        s += "<tr><th>" + html_escape(name) + "</th><td>" + html_escape(value) + "</td></tr>\n";
    return s + "</table>\n";
}

}  // namespace tessera
