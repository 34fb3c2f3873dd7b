// How the picture is made: replay the history (alloc adds a block to its op's total,
// free_requested removes it), with what was allocated before the history began as a
// band of its own, and sample the totals into one column per pixel, each column taking
// the moment of its highest total so that no peak falls between pixels.
#include "tools/memviz/memviz.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <vector>

#include "base/error.h"

namespace ember::tools {
namespace {

struct Event {
  int64_t t_ns;
  std::string op;
  int64_t delta;          // to the op's live bytes
  int64_t reserved_delta;
};

std::string mib(double bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f MiB", bytes / 1048576.0);
  return b;
}

std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else if (c == '"') o += "&quot;";
    else o += c;
  }
  return o;
}

const char* kColors[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948",
                         "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac", "#86bcb6", "#d37295"};

// Bounds on the numbers a snapshot may hold: byte counts up to 1 TiB each (so that sums
// over millions of events stay far inside int64) and times up to 2^62 ns (a century).
constexpr int64_t kMaxBytes = int64_t(1) << 40, kMaxTime = int64_t(1) << 62;

// e[key] as an integer in [0, max]; anything else is an ember::Error naming the entry.
int64_t int_field(const nlohmann::json& e, const char* key, int64_t max, size_t index) {
  const auto it = e.find(key);
  EMBER_CHECK(it != e.end(), "memviz: history entry ", index, " has no '", key, "'");
  EMBER_CHECK(it->is_number_integer() && (it->is_number_unsigned() || it->get<int64_t>() >= 0) &&
                  it->get<uint64_t>() <= uint64_t(max),
              "memviz: history entry ", index, ": '", key, "' is ", it->dump(), ", expected an integer from 0 to ", max);
  return it->get<int64_t>();
}

// The column of time t among W columns spanning [t0, t1), in 128 bits: (t - t0) * W
// overflows int64 for spans near kMaxTime.
int column(int64_t t, int64_t t0, int64_t t1, int W) {
  return static_cast<int>(std::min<__int128>(W - 1, __int128(t - t0) * W / (t1 - t0)));
}

std::string render(const nlohmann::json& j, const MemvizOptions& opt);

}  // namespace

std::string render_memory_svg(const std::string& text, const MemvizOptions& opt) {
  for (const auto& [name, v] : {std::pair{"width", opt.width}, std::pair{"height", opt.height}})
    EMBER_CHECK(v >= kMinPlotSize && v <= kMaxPlotSize, "memviz: the plot ", name, " is ", v, " pixels, outside [",
                kMinPlotSize, ", ", kMaxPlotSize, "]");
  EMBER_CHECK(opt.top_ops >= 0 && opt.top_ops <= kMaxTopOps, "memviz: top_ops is ", opt.top_ops, ", outside [0, ",
              kMaxTopOps, "]");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    EMBER_FAIL("memviz: the snapshot is not JSON: ", e.what());
  }
  // A field of the wrong JSON type deep inside (a string where a number belongs) is a bad
  // snapshot too, not an uncaught nlohmann exception.
  try {
    return render(j, opt);
  } catch (const nlohmann::json::exception& e) {
    EMBER_FAIL("memviz: malformed snapshot: ", e.what());
  }
}

namespace {

std::string render(const nlohmann::json& j, const MemvizOptions& opt) {
  EMBER_CHECK(j.is_object() && j.contains("history") && j["history"].is_array() && j.contains("stats") &&
                  j["stats"].is_object(),
              "memviz: not an ember memory snapshot (expected 'history' and 'stats')");
  EMBER_CHECK(!j["history"].empty(),
              "memviz: the snapshot has no history; record one with record_memory_history(N) or EMBER_MEMORY_HISTORY=N");

  // Replay: per-address op, per-op live bytes.
  std::vector<Event> events;
  std::unordered_map<uint64_t, std::pair<std::string, int64_t>> live;
  int64_t net_allocated = 0, net_reserved = 0;
  size_t index = 0;
  int64_t last_t = 0;
  for (const auto& e : j["history"]) {
    EMBER_CHECK(e.is_object(), "memviz: history entry ", index, " is not an object");
    const std::string action = e.at("action");
    const int64_t size = int_field(e, "size", kMaxBytes, index);
    // nlohmann converts a float such as 1e89 to uint64 without a range check (undefined).
    const auto a = e.find("address");
    EMBER_CHECK(a != e.end() && a->is_number_unsigned(), "memviz: history entry ", index,
                ": 'address' is missing or not an unsigned integer");
    const uint64_t addr = a->get<uint64_t>();
    const int64_t t = int_field(e, "time_ns", kMaxTime, index);
    EMBER_CHECK(t >= last_t, "memviz: history entry ", index, " goes back in time (", t, " ns after ", last_t, ")");
    last_t = t;
    ++index;
    std::string op = e.value("op", "");
    if (op.empty()) op = "(unnamed)";
    if (action == "alloc") {
      live[addr] = {op, size};
      events.push_back({t, op, size, 0});
      net_allocated += size;
    } else if (action == "free_requested") {
      auto it = live.find(addr);
      if (it != live.end()) {
        events.push_back({t, it->second.first, -it->second.second, 0});
        live.erase(it);
      } else if (opt.baseline) {  // allocated before the history began
        events.push_back({t, "(before the history)", -size, 0});
      }
      net_allocated -= size;
    } else if (action == "segment_alloc" || action == "segment_free") {
      const int64_t d = action == "segment_alloc" ? size : -size;
      events.push_back({t, "", 0, d});
      net_reserved += d;
    }
  }
  EMBER_CHECK(!events.empty(), "memviz: the history has no alloc, free_requested or segment events to draw");
  auto stat = [&](const char* key) {
    const auto it = j["stats"].find(key);
    if (it == j["stats"].end()) return int64_t(0);
    EMBER_CHECK(it->is_number_unsigned() && it->get<uint64_t>() <= uint64_t(kMaxBytes), "memviz: stats '", key,
                "' is ", it->dump(), ", expected an integer from 0 to ", kMaxBytes);
    return it->get<int64_t>();
  };
  const int64_t allocated_now = stat("allocated_bytes.all.current");
  const int64_t reserved_now = stat("reserved_bytes.all.current");
  const int64_t before = opt.baseline ? std::max<int64_t>(0, allocated_now - net_allocated) : 0;
  const int64_t reserved_before = std::max<int64_t>(0, reserved_now - net_reserved);

  // The ops by their own peak; the largest get a band each.
  std::map<std::string, int64_t> cur, peak;
  cur["(before the history)"] = before;
  peak["(before the history)"] = before;
  for (const Event& e : events) {
    if (e.op.empty()) continue;
    cur[e.op] += e.delta;
    peak[e.op] = std::max(peak[e.op], cur[e.op]);
  }
  std::vector<std::pair<int64_t, std::string>> ranked;
  for (const auto& [op, p] : peak) ranked.push_back({p, op});
  std::sort(ranked.rbegin(), ranked.rend());
  std::vector<std::string> bands;
  for (const auto& [p, op] : ranked)
    if (static_cast<int>(bands.size()) < opt.top_ops && p > 0) bands.push_back(op);
  const bool other = ranked.size() > bands.size();
  if (other) bands.push_back("other");
  auto band_of = [&](const std::string& op) {
    auto it = std::find(bands.begin(), bands.end(), op);
    return it != bands.end() ? static_cast<int>(it - bands.begin()) : static_cast<int>(bands.size()) - 1;
  };

  // Columns: the state at the highest total within each pixel's time span.
  const int W = opt.width, H = opt.height;
  const int64_t t0 = events.front().t_ns, t1 = std::max(events.back().t_ns, t0 + 1);
  std::vector<int64_t> band_bytes(bands.size(), 0);
  band_bytes[band_of("(before the history)")] = before;
  int64_t reserved = reserved_before, total = before, top = opt.baseline ? std::max(reserved_before, before) : 0;
  int64_t peak_total = before, peak_t = t0;
  std::vector<std::vector<int64_t>> cols(W);
  std::vector<int64_t> col_total(W, -1), col_reserved(W, reserved_before);
  for (const Event& e : events) {
    if (!e.op.empty()) {
      band_bytes[band_of(e.op)] += e.delta;
      total += e.delta;
    }
    reserved += e.reserved_delta;
    const int c = column(e.t_ns, t0, t1, W);
    if (total > col_total[c]) {
      col_total[c] = total;
      cols[c] = band_bytes;
    }
    col_reserved[c] = std::max(col_reserved[c], reserved);
    top = std::max({top, total, opt.baseline ? reserved : 0});
    if (total > peak_total) peak_total = total, peak_t = e.t_ns;
  }
  for (int c = 0; c < W; ++c)  // columns with no event carry the previous one
    if (col_total[c] < 0) {
      cols[c] = c ? cols[c - 1] : std::vector<int64_t>(band_bytes.size(), 0);
      col_total[c] = c ? col_total[c - 1] : 0;
      col_reserved[c] = c ? col_reserved[c - 1] : reserved_before;
    }

  const int left = 80, right = 340, top_m = 40, bottom = 40;
  const double ys = top > 0 ? double(H) / double(top) : 1.0;
  auto X = [&](int c) { return left + c; };
  auto Y = [&](double bytes) { return top_m + H - bytes * ys; };
  std::string s;
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" "
                "font-size=\"12\">\n",
                left + W + right, top_m + H + bottom);
  s += buf;
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  std::snprintf(buf, sizeof buf, "<text x=\"%d\" y=\"20\" font-size=\"14\">memory over time, %s: peak %s allocated</text>\n",
                left, escape(j.value("device", std::string("?"))).c_str(), mib(double(peak_total)).c_str());
  s += buf;
  // Stacked bands, bottom to top.
  std::vector<double> base(W, 0.0);
  for (size_t b = 0; b < bands.size(); ++b) {
    std::string pts;
    for (int c = 0; c < W; ++c) {
      std::snprintf(buf, sizeof buf, "%d,%.1f ", X(c), Y(base[c] + double(cols[c][b])));
      pts += buf;
    }
    for (int c = W - 1; c >= 0; --c) {
      std::snprintf(buf, sizeof buf, "%d,%.1f ", X(c), Y(base[c]));
      pts += buf;
      base[c] += double(cols[c][b]);
    }
    s += "<polygon fill=\"" + std::string(kColors[b % 12]) + "\" stroke=\"none\" points=\"" + pts + "\"/>\n";
  }
  std::string line;
  for (int c = 0; c < W; ++c) {
    std::snprintf(buf, sizeof buf, "%d,%.1f ", X(c), Y(double(col_reserved[c])));
    line += buf;
  }
  if (opt.baseline)  // reserved memory includes what the baseline left out
    s += "<polyline fill=\"none\" stroke=\"black\" stroke-dasharray=\"4 3\" points=\"" + line + "\"/>\n";
  // Axes, ticks, the peak, the legend.
  std::snprintf(buf, sizeof buf, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", left, top_m + H,
                left + W, top_m + H);
  s += buf;
  std::snprintf(buf, sizeof buf, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", left, top_m, left,
                top_m + H);
  s += buf;
  for (int k = 0; k <= 4; ++k) {
    const double bytes = double(top) * k / 4;
    std::snprintf(buf, sizeof buf, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", left - 6, Y(bytes) + 4,
                  mib(bytes).c_str());
    s += buf;
    const double ms = double(t1 - t0) * k / 4 / 1e6;
    std::snprintf(buf, sizeof buf, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%.1f ms</text>\n", left + W * k / 4,
                  top_m + H + 18, ms);
    s += buf;
  }
  const int pc = column(peak_t, t0, t1, W);
  std::snprintf(buf, sizeof buf,
                "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"red\"/><text x=\"%d\" y=\"%d\" fill=\"red\">peak</text>\n",
                X(pc), top_m, X(pc), top_m + H, X(pc) + 3, top_m + 12);
  s += buf;
  for (size_t b = 0; b < bands.size(); ++b) {
    const int y = top_m + 10 + static_cast<int>(b) * 20;
    std::snprintf(buf, sizeof buf, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/>\n", left + W + 16,
                  y - 10, kColors[b % 12]);
    s += buf;
    const int64_t p = bands[b] == "other" ? 0 : peak[bands[b]];  // "other": no single peak
    s += "<text x=\"" + std::to_string(left + W + 34) + "\" y=\"" + std::to_string(y) + "\">" + escape(bands[b]) +
         (p > 0 ? " (peak " + mib(double(p)) + ")" : "") + "</text>\n";
  }
  const int ly = top_m + 10 + static_cast<int>(bands.size()) * 20;
  if (opt.baseline) std::snprintf(buf, sizeof buf,
                "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\" stroke-dasharray=\"4 3\"/>"
                "<text x=\"%d\" y=\"%d\">reserved</text>\n",
                left + W + 16, ly - 4, left + W + 28, ly - 4, left + W + 34, ly);
  if (opt.baseline) s += buf;
  return s + "</svg>\n";
}

}  // namespace
}  // namespace ember::tools
