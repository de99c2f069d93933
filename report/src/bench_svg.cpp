#include "tessera/report/bench_svg.h"

#include <algorithm>
#include <iterator>

#include <fmt/format.h>

#include "tessera/text.h"

namespace tessera {

namespace {

constexpr int kWidth = 720, kHeight = 320, kLeft = 64, kRight = 150, kTop = 30, kBottom = 50;
const char *kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"};

const char *color_of(int index) { return kColors[static_cast<size_t>(index) % std::size(kColors)]; }

std::string svg_lines(const LineChart &c, double top, double x0, double dx) {
    std::string s;
    for (size_t k = 0; k < c.series.size(); k++) {
        const LineSeries &line = c.series[k];
        const char *color = color_of(line.color);
        std::string points;
        for (const auto &[i, v] : line.points) {
            const double x = x0 + dx * static_cast<double>(i), y = kTop + (kHeight - kTop - kBottom) * (1 - v / top);
            points += fmt::format("{:.1f},{:.1f} ", x, y);
            s += fmt::format("<circle cx='{:.1f}' cy='{:.1f}' r='3.5' fill='{}'/>", x, y, color);
        }
        s += fmt::format("<polyline points='{}' fill='none' stroke='{}' stroke-width='2'{}/>", points, color,
                         line.dashed ? " stroke-dasharray='6,4'" : "");
        s += fmt::format("<text x='{}' y='{}' fill='{}' font-size='13'>{}</text>", kWidth - kRight + 14,
                         kTop + 18 * static_cast<int>(k + 1), color, html_escape(line.name));
    }
    return s;
}

std::string svg_axes(const LineChart &c, double top, double x0, double dx) {
    std::string s = fmt::format("<line x1='{0}' y1='{1}' x2='{0}' y2='{2}' stroke='#333'/>", kLeft, kTop,
                                kHeight - kBottom);
    s += fmt::format("<line x1='{0}' y1='{1}' x2='{2}' y2='{1}' stroke='#333'/>", kLeft, kHeight - kBottom,
                     kWidth - kRight);
    for (int t = 0; t <= 4; t++) {
        const double v = top * t / 4, y = kTop + (kHeight - kTop - kBottom) * (1 - static_cast<double>(t) / 4);
        s += fmt::format("<text x='{}' y='{:.1f}' font-size='11' text-anchor='end'>{}</text>", kLeft - 6, y + 4,
                         c.y_label(v));
    }
    // A label of several parameters ("hidden=4096,layers=6") takes a line
    // each, in a smaller font where the longest would reach the next label
    // (about 0.62 em a character).
    size_t most_lines = 1, longest = 0;
    for (const std::string &x : c.xs)
        for (const std::string &line : split_list(x)) longest = std::max(longest, line.size());
    const double fits = c.xs.size() > 1 ? 0.95 * dx / (0.62 * static_cast<double>(longest)) : 11;
    const int font = static_cast<int>(std::clamp(fits, 7.0, 11.0));
    for (size_t i = 0; i < c.xs.size(); i++) {
        const double x = x0 + dx * static_cast<double>(i);
        const std::vector<std::string> lines = split_list(c.xs[i]);
        most_lines = std::max(most_lines, lines.size());
        s += fmt::format("<text x='{:.1f}' y='{}' font-size='{}' text-anchor='middle'>", x, kHeight - kBottom + 16,
                         font);
        for (size_t l = 0; l < lines.size(); l++)
            s += fmt::format("<tspan x='{:.1f}' dy='{}'>{}</tspan>", x, l == 0 ? 0 : 12, html_escape(lines[l]));
        s += "</text>";
    }
    s += fmt::format("<text x='{}' y='{}' font-size='12' text-anchor='middle'>{}</text>", (kLeft + kWidth - kRight) / 2,
                     kHeight - 12 + 8 * static_cast<int>(most_lines - 1), html_escape(c.x_title));
    if (c.y_title.empty()) return s;
    return s + fmt::format("<text x='12' y='{}' font-size='12' transform='rotate(-90 12 {})' text-anchor='middle'>"
                           "{}</text>",
                           kHeight / 2, kHeight / 2, html_escape(c.y_title));
}

}  // namespace

std::string svg_line_chart(const LineChart &c) {
    double top = 0;
    for (const LineSeries &line : c.series)
        for (const auto &[i, v] : line.points) top = std::max(top, v);
    if (c.xs.empty() || top <= 0) return "<p>No row has a value to plot.</p>";
    top *= 1.1;
    const double x0 = kLeft + 20, x1 = kWidth - kRight - 10;
    const double dx = c.xs.size() > 1 ? (x1 - x0) / static_cast<double>(c.xs.size() - 1) : 0;
    std::string s = fmt::format("<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' "
                                "font-family='sans-serif'>",
                                kWidth, kHeight);
    return s + svg_axes(c, top, x0, dx) + svg_lines(c, top, x0, dx) + "</svg>";
}

std::string svg_stacked_bars(const BarLegend &legend, const std::vector<StackedBar> &bars) {
    const int bar = 16, gap = 6, label = 300, width = 400;
    const int height = static_cast<int>(bars.size()) * (bar + gap) + 40;
    // Room for the marker's name after the parts' names.
    const int legend_right = legend.marker.empty() ? 0 : label + 110 * static_cast<int>(legend.parts.size() + 1);
    std::string s = fmt::format("<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' "
                                "font-family='sans-serif' font-size='11'>",
                                std::max(label + width + 20, legend_right), height);
    for (size_t k = 0; k < legend.parts.size(); k++)
        s += fmt::format("<rect x='{}' y='4' width='12' height='12' fill='{}'/><text x='{}' y='14'>{}</text>",
                         label + 110 * static_cast<int>(k), legend.parts[k].second,
                         label + 110 * static_cast<int>(k) + 16, html_escape(legend.parts[k].first));
    if (!legend.marker.empty()) {
        const int x = label + 110 * static_cast<int>(legend.parts.size());
        s += fmt::format("<line x1='{0}' y1='3' x2='{0}' y2='17' stroke='#000' stroke-width='2'/>"
                         "<text x='{1}' y='14'>{2}</text>",
                         x + 6, x + 16, html_escape(legend.marker));
    }
    for (size_t i = 0; i < bars.size(); i++) {
        const StackedBar &b = bars[i];
        const int y = 28 + static_cast<int>(i) * (bar + gap);
        s += fmt::format("<text x='{}' y='{}' text-anchor='end'>{}</text>", label - 6, y + 12, html_escape(b.label));
        if (!b.note.empty() || b.full <= 0) {
            s += fmt::format("<text x='{}' y='{}' fill='#666'>{}</text>", label, y + 12, html_escape(b.note));
            continue;
        }
        double x = label;
        for (size_t k = 0; k < b.parts.size(); k++) {
            const double w = width * b.parts[k] / b.full;
            s += fmt::format("<rect x='{:.1f}' y='{}' width='{:.1f}' height='{}' fill='{}'/>", x, y, w, bar,
                             legend.parts.at(k).second);
            x += w;
        }
        if (b.marker >= 0)
            s += fmt::format("<line x1='{0:.1f}' y1='{1}' x2='{0:.1f}' y2='{2}' stroke='#000' stroke-width='2'/>",
                             label + width * b.marker / b.full, y - 2, y + bar + 2);
    }
    return s + "</svg>";
}

}  // namespace tessera
