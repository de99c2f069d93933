// The pictures of tessera-bench's HTML reports: inline SVG, no scripts and no
// fetches, so that a report (a page from tessera/html_page.h) is one file that
// opens anywhere. The modes decide what to plot (bench_html.cpp,
// bench_measure_report.cpp); this draws it.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace tessera {

// One line of a chart: a value at some of the chart's x positions.
struct LineSeries {
    std::string name;               // its legend
    std::map<size_t, double> points;  // x index -> value
    int color = 0;                  // index into the palette; series may share one
    bool dashed = false;
};

// Lines over named x positions (device counts, models, budgets), evenly spaced.
struct LineChart {
    std::vector<std::string> xs;
    std::vector<LineSeries> series;
    std::string x_title, y_title;  // an empty y_title draws none
    std::function<std::string(double)> y_label;  // the y axis's tick labels
};

// The chart as an <svg>, the y axis from 0 to 1.1 times the largest value; a
// paragraph saying so when no series has a point.
std::string svg_line_chart(const LineChart &chart);

// One horizontal bar: its parts stacked left to right; `full` is the value
// that spans the whole width; `marker`, when >= 0, a black tick at that value.
// A bar with a note (and no parts) prints the note instead.
struct StackedBar {
    std::string label;
    std::vector<double> parts;
    double full = 0;
    double marker = -1;
    std::string note;
};

// The name and colour of each part, for the legend; `marker` names the tick
// ("" for no tick in the legend).
struct BarLegend {
    std::vector<std::pair<std::string, std::string>> parts;  // name, colour
    std::string marker;
};

std::string svg_stacked_bars(const BarLegend &legend, const std::vector<StackedBar> &bars);

}  // namespace tessera
