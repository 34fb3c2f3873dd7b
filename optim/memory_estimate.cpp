// memory_estimate: two training steps on the meta device, with an accounting listener.
#include "optim/memory_estimate.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "base/error.h"
#include "core/autocast.h"
#include "core/memory.h"
#include "core/meta.h"
#include "layers/layers.h"
#include "memory/format.h"
#include "optim/optimizer.h"

namespace ember::optim {
namespace {

// Scope tags for what is not a module: the loss and the optimizer's step.
const char kLossTag = 0, kOptimizerTag = 0;
constexpr const char* kOutside = "(outside modules)";

struct Row {
  const void* tag;
  std::string name, type;
};

// One row per module, each once (a module held twice is charged under its first name).
void collect_rows(const nn::Module& m, std::vector<Row>& rows) {
  for (const auto& [name, mod] : m.named_modules()) rows.push_back({mod.get(), name, mod->name()});
}

// Charges each meta allocation to the row of the innermost scope, and follows every
// open scope's rise above the bytes live when it began.
class Accounting final : public MetaListener {
 public:
  Accounting(const std::unordered_map<const void*, size_t>& row_of, size_t outside)
      : row_of_(row_of), outside_(outside), live_by_row_(outside + 1), peak_by_row_(outside + 1) {}

  void allocated(const void* key, std::size_t bytes, const void* scope) override {
    const size_t row = row_for(scope);
    const auto n = static_cast<int64_t>(bytes);
    live_[key] = {n, row};
    live_by_row_[row] += n;
    current_ += n;
    for (const Frame& f : stack_) peak_by_row_[f.row] = std::max(peak_by_row_[f.row], current_ - f.base);
  }
  void freed(const void* key) override {
    auto it = live_.find(key);
    if (it == live_.end()) return;  // allocated before the estimate began (the parameters)
    live_by_row_[it->second.second] -= it->second.first;
    current_ -= it->second.first;
    live_.erase(it);
  }
  void entered(const void* scope) override { stack_.push_back({row_for(scope), current_}); }
  void left(const void*) override {
    if (!stack_.empty()) stack_.pop_back();
  }

  const std::vector<int64_t>& live_by_row() const { return live_by_row_; }
  const std::vector<int64_t>& peak_by_row() const { return peak_by_row_; }

 private:
  struct Frame {
    size_t row;
    int64_t base;
  };
  size_t row_for(const void* scope) const {
    auto it = row_of_.find(scope);
    return it == row_of_.end() ? outside_ : it->second;
  }
  const std::unordered_map<const void*, size_t>& row_of_;
  const size_t outside_;
  std::unordered_map<const void*, std::pair<int64_t, size_t>> live_;
  std::vector<int64_t> live_by_row_, peak_by_row_;
  std::vector<Frame> stack_;
  int64_t current_ = 0;
};

class MetaTargetScope {
 public:
  explicit MetaTargetScope(DeviceType t) : saved_(meta_target()) { set_meta_target(t); }
  ~MetaTargetScope() { set_meta_target(saved_); }

 private:
  DeviceType saved_;
};

std::unique_ptr<Optimizer> make_optimizer(const std::string& name, std::vector<Tensor> params) {
  if (name == "adam") return std::make_unique<Adam>(std::move(params), Adam::Options{});
  if (name == "adamw") return std::make_unique<AdamW>(std::move(params), AdamW::Options{});
  return std::make_unique<SGD>(std::move(params), SGD::Options{.momentum = 0.9});
}

int64_t buffers_per_param(const std::string& optimizer) { return optimizer == "sgd" ? 1 : 2; }

// The parameters a module registered itself (not its children's): names without a further dot.
bool own_parameter(const std::string& module, const std::string& param) {
  const std::string prefix = module.empty() ? "" : module + ".";
  return param.starts_with(prefix) && param.find('.', prefix.size()) == std::string::npos;
}

// "-" for none, to keep the table readable.
std::string format_size(int64_t bytes) { return bytes == 0 ? "-" : memory::format_size(static_cast<std::size_t>(bytes)); }

}  // namespace

MemoryEstimate memory_estimate(nn::Module& model, const Shape& input_shape, const MemoryEstimateOptions& o) {
  EMBER_CHECK(!input_shape.empty() && input_shape[0] > 0, "memory_estimate: the input shape ",
              shape_str(input_shape), " needs a batch dim of at least 1");
  EMBER_CHECK(!o.target.is_meta(), "memory_estimate: the target is the device to model (cpu or cuda), not meta");
  EMBER_CHECK(o.micro_batch >= 0, "memory_estimate: micro_batch must be >= 0, got ", o.micro_batch);
  EMBER_CHECK(o.optimizer_state_shards >= 1 && o.gradient_shards >= 1, "memory_estimate: shard counts must be >= 1, got ",
              o.optimizer_state_shards, " and ", o.gradient_shards);
  for (const auto& [name, p] : model.named_parameters())
    EMBER_CHECK(p.device().is_meta(), "memory_estimate: parameter '", name, "' is on ", p.device().str(),
                "; build the model on the meta device (set_default_device(Device::meta()) or Module::to)");
  std::shared_ptr<nn::Sequential> wrapped;
  nn::Module* run = &model;
  if (o.checkpoint) {
    auto* seq = dynamic_cast<nn::Sequential*>(&model);
    EMBER_CHECK(seq, "memory_estimate: checkpointing wraps the blocks of a Sequential; the model is ", model.name());
    wrapped = nn::checkpoint_blocks(*seq);
    run = wrapped.get();
  }
  EMBER_CHECK(o.optimizer == "sgd" || o.optimizer == "adam" || o.optimizer == "adamw",
              "memory_estimate: unknown optimizer '", o.optimizer, "' (expected sgd, adam or adamw)");

  std::vector<Row> rows;
  collect_rows(*run, rows);
  rows.push_back({&kLossTag, "(loss)", "CrossEntropyLoss"});
  rows.push_back({&kOptimizerTag, "(optimizer step)", o.optimizer});
  rows.push_back({nullptr, kOutside, "batch and the rest"});
  std::unordered_map<const void*, size_t> row_of;
  for (size_t i = 0; i < rows.size(); ++i) row_of.emplace(rows[i].tag, i);

  const MetaTargetScope target(o.target.type);
  memory::CachingAllocator& alloc = device_allocator(Device::meta());
  // Gradients left by an earlier estimate or step would shift every block after them.
  for (const Tensor& p : run->parameters()) p.set_grad({});
  alloc.empty_cache();  // no cached segment from an earlier estimate
  const int64_t live_before = alloc.stats().allocated_bytes[memory::kAllPools].current;
  alloc.reset_peak_stats();

  MemoryEstimate est;
  est.batch = input_shape[0];
  est.target = o.target;
  est.modules.resize(rows.size());
  int64_t param_blocks = 0, saved_by_sharding = 0;
  const NamedTensors params = run->named_parameters();
  for (size_t r = 0; r < rows.size(); ++r) {
    ModuleMemory& m = est.modules[r];
    m.name = rows[r].name;
    m.type = rows[r].type;
    if (r + 3 >= rows.size()) continue;  // the loss, the optimizer step and the rest own no parameters
    for (const auto& [pname, p] : params) {
      if (!own_parameter(m.name, pname)) continue;
      // numel and size captured by value: a lambda may not name a structured binding (clang).
      const auto bytes = [&alloc, numel = p.numel(), size = p.element_size()](int64_t shards) {
        const int64_t n = (numel + shards - 1) / shards;
        return static_cast<int64_t>(alloc.round_size(static_cast<std::size_t>(n * size)));
      };
      const int64_t whole = bytes(1), grad = bytes(o.gradient_shards), state = bytes(o.optimizer_state_shards);
      const int64_t buffers = buffers_per_param(o.optimizer);
      m.parameters += whole;
      m.gradients += grad;
      m.optimizer_state += buffers * state;
      param_blocks += whole;
      saved_by_sharding += (whole - grad) + buffers * (whole - state);
    }
  }

  Accounting acc(row_of, rows.size() - 1);
  std::vector<int64_t> activations;
  {
    const MetaListenerScope listen(acc);
    std::unique_ptr<Optimizer> opt = make_optimizer(o.optimizer, run->parameters());
    const Tensor x = empty(input_shape, {o.token_inputs ? kInt64 : kFloat32, Device::meta()});
    const Tensor y = empty(o.token_inputs ? input_shape : Shape{input_shape[0]}, {kInt64, Device::meta()});
    const int64_t N = input_shape[0], piece = o.micro_batch > 0 ? std::min(o.micro_batch, N) : N;
    nn::CrossEntropyLoss criterion;
    for (int step = 0; step < 2; ++step) {
      opt->zero_grad();
      for (int64_t s = 0; s < N; s += piece) {
        const int64_t n = std::min(piece, N - s);
        Tensor loss;
        {
          std::optional<AutocastScope> autocast;  // the forward only, as the examples do
          if (o.autocast) autocast.emplace(*o.autocast);
          const bool last = step == 1 && s + piece >= N;
          // What this forward keeps: earlier pieces' gradients are live already.
          const std::vector<int64_t> before = last ? acc.live_by_row() : std::vector<int64_t>();
          Tensor logits = (*run)(x.narrow(0, s, n));
          if (last) {
            activations = acc.live_by_row();
            for (size_t r = 0; r + 1 < activations.size(); ++r) activations[r] -= before[r];  // the batch stays
          }
          const MemoryScope in_loss(&kLossTag);
          loss = o.token_inputs ? criterion(logits.reshape({-1, logits.size(-1)}), y.narrow(0, s, n).reshape({-1}))
                                : criterion(logits, y.narrow(0, s, n));
          if (n < N) loss = mul(loss, Scalar(static_cast<double>(n) / static_cast<double>(N)));
        }
        loss.backward();
      }
      const MemoryScope in_step(&kOptimizerTag);
      opt->step();
    }
    opt->zero_grad();  // leaves the model as it found it
  }
  for (size_t r = 0; r < rows.size(); ++r) {
    ModuleMemory& m = est.modules[r];
    m.activations = activations[r];
    m.peak = acc.peak_by_row()[r];
    est.parameters += m.parameters;
    est.gradients += m.gradients;
    est.optimizer_state += m.optimizer_state;
    est.activations += m.activations;
  }
  const int64_t peak = alloc.stats().allocated_bytes[memory::kAllPools].peak;
  est.step_peak_bytes = peak - live_before + param_blocks - saved_by_sharding;
  // The segments the model allocator reserved at the peak, parameters included: what a
  // cap bounds (the allocated peak fitting under a cap does not make the step fit).
  est.step_peak_reserved_bytes = alloc.stats().reserved_bytes[memory::kAllPools].peak;
  return est;
}

int64_t max_batch_that_fits(nn::Module& model, const Shape& input_shape, std::size_t capacity,
                            const MemoryEstimateOptions& options) {
  EMBER_CHECK(!input_shape.empty(), "max_batch_that_fits: the input shape needs a batch dim");
  auto fits = [&](int64_t batch) {
    Shape s = input_shape;
    s[0] = batch;
    return memory_estimate(model, s, options).step_peak_bytes <= static_cast<int64_t>(capacity);
  };
  constexpr int64_t kMax = int64_t{1} << 24;
  if (!fits(1)) return 0;
  int64_t lo = 1, hi = 2;  // fits(lo); hi unknown
  while (hi <= kMax && fits(hi)) {
    lo = hi;
    hi *= 2;
  }
  if (hi > kMax) return kMax;
  while (hi - lo > 1) {  // fits(lo), not fits(hi)
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

std::string MemoryEstimate::str() const {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%-22s %-26s %11s %11s %11s %11s %11s\n", "module", "type", "params", "grads",
                "optim state", "activations", "peak");
  out += line;
  for (const ModuleMemory& m : modules) {
    if (m.parameters + m.gradients + m.optimizer_state + m.activations + m.peak == 0) continue;
    const std::string type = m.type.size() > 26 ? m.type.substr(0, 23) + "..." : m.type;
    std::snprintf(line, sizeof line, "%-22s %-26s %11s %11s %11s %11s %11s\n", m.name.empty() ? "(model)" : m.name.c_str(),
                  type.c_str(), format_size(m.parameters).c_str(), format_size(m.gradients).c_str(),
                  format_size(m.optimizer_state).c_str(), format_size(m.activations).c_str(),
                  format_size(m.peak).c_str());
    out += line;
  }
  std::snprintf(line, sizeof line, "%-22s %-26s %11s %11s %11s %11s\n", "total", "", format_size(parameters).c_str(),
                format_size(gradients).c_str(), format_size(optimizer_state).c_str(), format_size(activations).c_str());
  out += line;
  std::snprintf(line, sizeof line, "estimated step peak on %s at batch %lld: %s (%lld bytes allocated)\n",
                target.str().c_str(), static_cast<long long>(batch), format_size(step_peak_bytes).c_str(),
                static_cast<long long>(step_peak_bytes));
  return out + line;
}

std::string MemoryEstimate::json() const {
  nlohmann::json rows = nlohmann::json::array();
  for (const ModuleMemory& m : modules)
    rows.push_back({{"name", m.name},
                    {"type", m.type},
                    {"parameters", m.parameters},
                    {"gradients", m.gradients},
                    {"optimizer_state", m.optimizer_state},
                    {"activations", m.activations},
                    {"peak", m.peak}});
  nlohmann::json j = {{"estimated_step_peak_bytes", step_peak_bytes},
                      {"batch", batch},
                      {"device", target.str()},
                      {"parameters", parameters},
                      {"gradients", gradients},
                      {"optimizer_state", optimizer_state},
                      {"activations", activations},
                      {"modules", rows}};
  return j.dump();
}

}  // namespace ember::optim
