#include "memory/export.h"

#include <nlohmann/json.hpp>

namespace ember::memory {

const char* action_name(TraceEvent::Action a) {
  switch (a) {
    case TraceEvent::Action::kAlloc: return "alloc";
    case TraceEvent::Action::kFreeRequested: return "free_requested";
    case TraceEvent::Action::kFreeCompleted: return "free_completed";
    case TraceEvent::Action::kSegmentAlloc: return "segment_alloc";
    case TraceEvent::Action::kSegmentFree: return "segment_free";
    case TraceEvent::Action::kOom: return "oom";
  }
  return "?";
}

const char* state_name(BlockInfo::State s) {
  switch (s) {
    case BlockInfo::State::kAllocated: return "allocated";
    case BlockInfo::State::kAwaitingStreams: return "awaiting_streams";
    case BlockInfo::State::kFree: return "free";
  }
  return "?";
}

std::string to_json(const Snapshot& snap) {
  nlohmann::json j;
  j["device"] = snap.device;
  j["stats"] = snap.stats.to_map();
  nlohmann::json segs = nlohmann::json::array();
  for (const SegmentInfo& s : snap.segments) {
    nlohmann::json blocks = nlohmann::json::array();
    for (const BlockInfo& b : s.blocks)
      blocks.push_back({{"address", b.address},
                        {"size", b.size},
                        {"requested", b.requested},
                        {"state", state_name(b.state)},
                        {"op", b.op},
                        {"shape", b.shape}});
    segs.push_back({{"address", s.address},
                    {"size", s.size},
                    {"stream", s.stream},
                    {"pool", s.small_pool ? "small" : "large"},
                    {"private_pool", s.private_pool},
                    {"blocks", std::move(blocks)}});
  }
  j["segments"] = std::move(segs);
  nlohmann::json hist = nlohmann::json::array();
  for (const TraceEvent& e : snap.history)
    hist.push_back({{"action", action_name(e.action)},
                    {"address", e.address},
                    {"size", e.size},
                    {"stream", e.stream},
                    {"time_ns", e.time_ns},
                    {"op", e.op},
                    {"shape", e.shape}});
  j["history"] = std::move(hist);
  return j.dump(1);
}

std::string to_chrome_trace(const Snapshot& snap) {
  // Running totals rebuilt from the history (which may start mid-run: they are relative
  // to its first event).
  nlohmann::json events = nlohmann::json::array();
  int64_t allocated = 0, reserved = 0;
  for (const TraceEvent& e : snap.history) {
    const double us = static_cast<double>(e.time_ns) / 1000.0;
    const auto size = static_cast<int64_t>(e.size);
    switch (e.action) {
      case TraceEvent::Action::kAlloc: allocated += size; break;
      case TraceEvent::Action::kFreeRequested: allocated -= size; break;
      case TraceEvent::Action::kSegmentAlloc: reserved += size; break;
      case TraceEvent::Action::kSegmentFree: reserved -= size; break;
      default: break;
    }
    if (e.action != TraceEvent::Action::kFreeCompleted) {
      const std::string name = e.action == TraceEvent::Action::kOom ? "OOM: " + e.op
                               : e.op.empty()                        ? std::string(action_name(e.action))
                                                                     : e.op;
      events.push_back({{"name", name},
                        {"cat", action_name(e.action)},
                        {"ph", "i"},
                        {"s", "t"},
                        {"ts", us},
                        {"pid", 0},
                        {"tid", e.stream},
                        {"args", {{"bytes", e.size}, {"address", e.address}, {"shape", e.shape}}}});
    }
    events.push_back({{"name", "memory (" + snap.device + ")"},
                      {"ph", "C"},
                      {"ts", us},
                      {"pid", 0},
                      {"args", {{"allocated", allocated}, {"reserved", reserved}}}});
  }
  nlohmann::json j = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  return j.dump();
}

}  // namespace ember::memory
