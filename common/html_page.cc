#include "common/html_page.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace strata {
namespace {

constexpr int kWidth = 360;
constexpr int kHeight = 140;
// Room for the axis labels on the left and below.
constexpr int kLeft = 62;
constexpr int kBottom = 18;

// 1234.5 -> "1.23k": short labels for an axis.
std::string ShortNumber(double value) {
  if (value >= 1e9) return absl::StrFormat("%.3gG", value / 1e9);
  if (value >= 1e6) return absl::StrFormat("%.3gM", value / 1e6);
  if (value >= 1e3) return absl::StrFormat("%.3gk", value / 1e3);
  return absl::StrFormat("%.3g", value);
}

constexpr char kStatusPageStyle[] =
    "body{font-family:sans-serif;margin:1.5em}"
    "table{border-collapse:collapse;margin-bottom:1.5em}"
    "th,td{border:1px solid #bbb;padding:0.3em 0.7em;text-align:right}"
    "th{background:#eee}.down{color:#b00;font-weight:bold}"
    ".up{color:#070}figure{display:inline-block;margin:0 1.5em 1em 0}"
    "figcaption{font-weight:bold;margin-bottom:0.2em}"
    ".legend{font-size:0.85em}";

}  // namespace

std::string StatusPageHead(const std::string& title, int refresh_seconds) {
  return absl::StrFormat(
      "<!DOCTYPE html><html><head><meta charset=\"utf-8\">"
      "<meta http-equiv=\"refresh\" content=\"%d\">"
      "<title>%s</title><style>%s</style></head><body>",
      refresh_seconds, HtmlEscape(title), kStatusPageStyle);
}

std::string StatusPageFoot(int refresh_seconds) {
  return absl::StrFormat(
      "<p>Reloads every %d s. Same numbers as <a href=\"/metrics\">/metrics"
      "</a>.</p></body></html>",
      refresh_seconds);
}

std::string HtmlEscape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string SvgLineChart(const std::string& id, const std::string& title,
                         const std::string& unit,
                         const std::vector<ChartSeries>& series) {
  double top = 0;
  size_t samples = 0;
  for (const ChartSeries& one : series) {
    for (double v : one.values) top = std::max(top, v);
    samples = std::max(samples, one.values.size());
  }
  // An empty or flat chart still has an axis.
  if (top <= 0) top = 1;
  const double plot_width = kWidth - kLeft - 4;
  const double plot_height = kHeight - kBottom - 6;
  std::string out = absl::StrFormat(
      "<figure id=\"%s\"><figcaption>%s</figcaption>"
      "<svg width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
      "xmlns=\"http://www.w3.org/2000/svg\">"
      "<rect x=\"%d\" y=\"6\" width=\"%.0f\" height=\"%.0f\" fill=\"#fafafa\" "
      "stroke=\"#ccc\"/>"
      "<text x=\"%d\" y=\"14\" font-size=\"10\" text-anchor=\"end\" "
      "class=\"axis-max\">%s</text>"
      "<text x=\"%d\" y=\"%.0f\" font-size=\"10\" text-anchor=\"end\">0</text>"
      "<text x=\"%d\" y=\"%d\" font-size=\"10\">%s</text>"
      "<text x=\"%d\" y=\"%d\" font-size=\"10\" text-anchor=\"end\">now"
      "</text>",
      HtmlEscape(id), HtmlEscape(title), kWidth, kHeight, kWidth, kHeight,
      kLeft, plot_width, plot_height, kLeft - 4,
      HtmlEscape(ShortNumber(top) + " " + unit), kLeft - 4, 6 + plot_height,
      kLeft, kHeight - 4, samples > 1 ? absl::StrCat(samples, " s ago") : "",
      kWidth - 4, kHeight - 4);
  for (const ChartSeries& one : series) {
    std::string points;
    const size_t n = one.values.size();
    for (size_t i = 0; i < n; ++i) {
      const double x = kLeft + (n > 1 ? plot_width * static_cast<double>(i) /
                                            static_cast<double>(n - 1)
                                      : plot_width);
      const double y = 6 + plot_height * (1 - one.values[i] / top);
      absl::StrAppendFormat(&points, "%s%.1f,%.1f", i ? " " : "", x, y);
    }
    absl::StrAppendFormat(&out,
                          "<polyline class=\"series\" data-name=\"%s\" "
                          "fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" "
                          "points=\"%s\"/>",
                          HtmlEscape(one.name), HtmlEscape(one.color), points);
  }
  absl::StrAppend(&out, "</svg><div class=\"legend\">");
  for (const ChartSeries& one : series) {
    absl::StrAppendFormat(
        &out,
        "<span style=\"color:%s\">&#9632;</span> %s <span class=\"last\" "
        "data-name=\"%s\">%s</span> %s &nbsp; ",
        HtmlEscape(one.color), HtmlEscape(one.name), HtmlEscape(one.name),
        one.values.empty() ? "-" : ShortNumber(one.values.back()),
        HtmlEscape(unit));
  }
  absl::StrAppend(&out, "</div></figure>");
  return out;
}

}  // namespace strata
