#ifndef STRATA_COMMON_HTML_PAGE_H_
#define STRATA_COMMON_HTML_PAGE_H_

// Pieces of the daemons' status pages (/status): escaping, the shared
// style, and small line charts drawn as inline SVG (no script, no external
// file), so that a page works from a plain HTTP GET.

#include <string>
#include <vector>

namespace strata {

// `text` with &, <, >, " and ' escaped for HTML.
std::string HtmlEscape(const std::string& text);

// The start of a status page up to its <body>: UTF-8, the shared style,
// `title` (escaped here), and a reload every `refresh_seconds`.
std::string StatusPageHead(const std::string& title, int refresh_seconds);
// Its end: a line saying how often it reloads and that its numbers are
// those of /metrics, then </body></html>.
std::string StatusPageFoot(int refresh_seconds);

// One line of a chart: its name (in the legend), an HTML colour, and one
// value per sample, oldest first.
struct ChartSeries {
  std::string name;
  std::string color;
  std::vector<double> values;
};

// A line chart, 360 x 140 px, of `series` over the same samples, scaled to
// the largest value (shown on the axis with `unit`). The <figure> has id
// `id`; each line is a <polyline class="series" data-name=NAME> whose
// points attribute holds one point per value, and the legend shows each
// series' last value (class "last").
std::string SvgLineChart(const std::string& id, const std::string& title,
                         const std::string& unit,
                         const std::vector<ChartSeries>& series);

}  // namespace strata

#endif  // STRATA_COMMON_HTML_PAGE_H_
