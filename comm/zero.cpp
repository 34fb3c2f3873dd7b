// ZeroOptimizer (comm/zero.h; Note [ZeRO] there).
#include "comm/zero.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "base/error.h"
#include "core/autograd.h"
#include "core/memory.h"
#include "core/ops.h"
#include "memory/format.h"

namespace ember::comm {
namespace {

std::vector<Tensor> parameters_of(DistributedDataParallel& ddp) {
  std::vector<Tensor> out;
  for (const auto& [name, t] : ddp.module().named_parameters()) out.push_back(t);
  return out;
}

}  // namespace

ZeroOptimizer::ZeroOptimizer(DistributedDataParallel& ddp, int stage, const Factory& make_inner)
    : Optimizer(parameters_of(ddp), 0.0),
      ddp_(ddp),
      pg_(ddp.process_group()),
      stage_(stage),
      grad_shards_(std::make_shared<std::vector<Tensor>>()),
      fresh_(std::make_shared<std::vector<bool>>()) {
  EMBER_CHECK(stage == 1 || stage == 2, "ZeroOptimizer: stage must be 1 or 2, got ", stage);
  EMBER_CHECK(make_inner != nullptr, "ZeroOptimizer: no optimizer factory");
  const int64_t world = pg_.size();
  for (const auto& ids : ddp_.buckets()) {
    Bucket b{ids, {}, 0};
    int64_t numel = 0;
    for (size_t i : ids) b.offset.push_back(numel), numel += params_[i].numel();
    b.shard = (numel + world - 1) / world;
    const Tensor& p0 = params_[ids[0]];
    shards_.push_back(zeros({b.shard}, TensorOptions(p0.dtype(), p0.device())));
    shards_.back().requires_grad_(true);
    grad_shards_->push_back(stage == 2 ? zeros({b.shard}, TensorOptions(p0.dtype(), p0.device())) : Tensor());
    buckets_.push_back(std::move(b));
  }
  fresh_->assign(buckets_.size(), false);
  inner_ = make_inner(shards_);
  EMBER_CHECK(inner_ != nullptr, "ZeroOptimizer: the factory made no optimizer");
  set_lr(inner_->lr());

  DistributedDataParallel::Sharding s{.pad_to = world, .exchange = nullptr, .release_buffers = false};
  if (stage == 2) {
    ProcessGroup* pg = &pg_;
    auto grads = grad_shards_;
    auto fresh = fresh_;
    s.exchange = [pg, grads, fresh](size_t b, const Tensor& buffer) {
      (*fresh)[b] = true;
      return pg->reduce_scatter((*grads)[b], buffer, ReduceOp::kAvg);
    };
    s.release_buffers = true;
  }
  ddp_.set_sharding(std::move(s));

  if (!params_.empty()) {
    device_ = params_[0].device();
    note_ = device_allocator(device_).add_report_note([this] { return memory_summary(); });
  }
}

ZeroOptimizer::~ZeroOptimizer() {
  if (note_) device_allocator(device_).remove_report_note(note_);
}

Tensor ZeroOptimizer::gather_bucket(size_t b, const Tensor& shard) const {
  Tensor full = empty({buckets_[b].shard * pg_.size()}, TensorOptions(shard.dtype(), shard.device()));
  pg_.all_gather(full, shard.detach().contiguous())->wait(pg_.timeout());
  return full;
}

void ZeroOptimizer::update() {
  ddp_.synchronize();
  NoGradGuard no_grad;
  const int64_t rank = pg_.rank();
  const std::vector<Tensor> buffers = ddp_.bucket_buffers();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const Bucket& bk = buckets_[b];
    // This rank's range of the current parameters (they may have been loaded since).
    const int64_t lo = rank * bk.shard, hi = lo + bk.shard;
    for (size_t s = 0; s < bk.params.size(); ++s) {
      const Tensor& p = params_[bk.params[s]];
      const int64_t a = std::max(lo, bk.offset[s]), e = std::min(hi, bk.offset[s] + p.numel());
      if (a < e)
        shards_[b].detach().narrow(0, a - lo, e - a).copy_(p.detach().reshape({-1}).narrow(0, a - bk.offset[s], e - a));
    }
    Tensor g;
    if (stage_ == 2) {
      if ((*fresh_)[b]) g = (*grad_shards_)[b];
      (*fresh_)[b] = false;
    } else if (params_[bk.params[0]].grad().defined()) {
      g = buffers[b].narrow(0, lo, bk.shard);
    }
    shards_[b].set_grad(g);
  }
  inner_->set_lr(lr());
  inner_->step();
  state_bytes_ = inner_->state_bytes();
  ++steps_;
  // One bucket at a time: the gathered copy is transient, at most a bucket's size.
  for (size_t b = 0; b < buckets_.size(); ++b) {
    shards_[b].set_grad({});
    const Tensor full = gather_bucket(b, shards_[b]);
    const Bucket& bk = buckets_[b];
    for (size_t s = 0; s < bk.params.size(); ++s) {
      const Tensor& p = params_[bk.params[s]];
      p.detach().copy_(full.narrow(0, bk.offset[s], p.numel()).view(p.shape()));
    }
  }
}

void ZeroOptimizer::consolidate_state_dict() {
  // Inner keys: state.<bucket>.<buffer>, in the order the buffers were made.
  std::vector<std::string> names;
  std::map<std::pair<size_t, std::string>, Tensor> shard_state;
  for (const auto& [key, t] : inner_->state_dict()) {
    if (key == "lr" || key == "step" || key.rfind("group.", 0) == 0) continue;
    const auto [b, name] = optim::parse_state_key(key, buckets_.size(), "ZeroOptimizer::consolidate_state_dict");
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    shard_state[{b, name}] = t;
  }
  std::vector<std::vector<std::pair<std::string, Tensor>>> per_param(params_.size());
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (const std::string& name : names) {
      auto it = shard_state.find({b, name});
      // Every rank made the same buffers (same buckets, same steps); a missing one is a bug.
      EMBER_CHECK(it != shard_state.end(), "ZeroOptimizer::consolidate_state_dict: bucket ", b, " has no '", name,
                  "' on rank ", pg_.rank());
      Tensor full = gather_bucket(b, it->second);
      const Bucket& bk = buckets_[b];
      for (size_t s = 0; s < bk.params.size(); ++s) {
        const Tensor& p = params_[bk.params[s]];
        per_param[bk.params[s]].emplace_back(name, full.narrow(0, bk.offset[s], p.numel()).view(p.shape()).clone());
      }
    }
  consolidated_.clear();
  for (size_t i = 0; i < per_param.size(); ++i)
    for (auto& [name, t] : per_param[i]) consolidated_.emplace_back("state." + std::to_string(i) + "." + name, t);
  consolidated_at_ = steps_;
}

NamedTensors ZeroOptimizer::state_dict() const {
  EMBER_CHECK(consolidated_at_ == steps_, "ZeroOptimizer::state_dict: the state is sharded across ranks and ",
              steps_ - consolidated_at_, " step(s) ran since it was gathered: call consolidate_state_dict() on ",
              "every rank first");
  NamedTensors out;
  out.emplace_back("lr", scalar_tensor(lr(), {kFloat64, Device::cpu()}));
  out.emplace_back("step", scalar_tensor(steps_, {kInt64, Device::cpu()}));
  // One group, as an unsharded optimizer over the same parameters saves it: every
  // parameter's index (the inner optimizer's indices are buckets') and the inner's options.
  std::vector<double> idx(params_.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<double>(i);
  out.emplace_back("group.0.params", tensor(idx, {static_cast<int64_t>(idx.size())}, {kInt64, Device::cpu()}));
  for (const auto& [key, t] : inner_->state_dict())
    if (key.rfind("group.0.", 0) == 0 && key != "group.0.params") out.emplace_back(key, t);
  for (const auto& kv : consolidated_) out.push_back(kv);
  return out;
}

void ZeroOptimizer::load_state_dict(const NamedTensors& state) {
  std::map<std::string, Tensor> given(state.begin(), state.end());
  EMBER_CHECK(given.count("lr") && given.count("step"),
              "ZeroOptimizer::load_state_dict: an optimizer state needs 'lr' and 'step'");
  std::map<std::pair<size_t, std::string>, Tensor> full;
  std::vector<std::string> names;
  NamedTensors kept;
  for (const auto& [key, t] : state) {
    // An unsharded optimizer's group options: its one group's lr is "lr" as well.
    if (key == "lr" || key == "step" || key.rfind("group.", 0) == 0) continue;
    const auto [i, name] = optim::parse_state_key(key, params_.size(), "ZeroOptimizer::load_state_dict");
    EMBER_CHECK(t.shape() == params_[i].shape(), "ZeroOptimizer::load_state_dict: '", key, "' has shape ",
                shape_str(t.shape()), " but parameter ", i, " has ", shape_str(params_[i].shape()));
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    full[{i, name}] = t;
    kept.emplace_back(key, t.to(params_[i].dtype()).to(params_[i].device()).contiguous().clone());
  }
  // This rank's shard of each bucket's flat state.
  NamedTensors inner{{"lr", given.at("lr")}, {"step", given.at("step")}};
  const int64_t world = pg_.size(), rank = pg_.rank();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const Bucket& bk = buckets_[b];
    for (const std::string& name : names) {
      Tensor flat = zeros({bk.shard * world}, TensorOptions(shards_[b].dtype(), shards_[b].device()));
      for (size_t s = 0; s < bk.params.size(); ++s) {
        auto it = full.find({bk.params[s], name});
        EMBER_CHECK(it != full.end(), "ZeroOptimizer::load_state_dict: 'state.", bk.params[s], ".", name,
                    "' is missing (a sharded optimizer needs each buffer for every parameter or for none)");
        flat.narrow(0, bk.offset[s], params_[bk.params[s]].numel()).copy_(it->second.reshape({-1}));
      }
      inner.emplace_back("state." + std::to_string(b) + "." + name, flat.narrow(0, rank * bk.shard, bk.shard).clone());
    }
  }
  inner_->load_state_dict(inner);  // checks the buffer names before it changes anything
  state_bytes_ = inner_->state_bytes();
  set_lr(given.at("lr").item<double>());
  steps_ = given.at("step").item<int64_t>();
  consolidated_ = std::move(kept);
  consolidated_at_ = steps_;
}

int64_t ZeroOptimizer::state_bytes() const { return state_bytes_; }

int64_t ZeroOptimizer::full_state_bytes() const {
  int64_t per_param = 0, shard = 0;  // buffer count from the shards' state
  for (const Tensor& s : shards_) shard += s.numel() * s.element_size();
  for (const Tensor& p : params_) per_param += p.numel() * p.element_size();
  return shard == 0 ? 0 : state_bytes() / shard * per_param;
}

int64_t ZeroOptimizer::gradient_bytes() const {
  int64_t n = 0;
  for (size_t b = 0; b < buckets_.size(); ++b)
    n += buckets_[b].shard * (stage_ == 2 ? 1 : pg_.size()) * shards_[b].element_size();
  return n;
}

int64_t ZeroOptimizer::full_gradient_bytes() const {
  int64_t n = 0;
  for (const Tensor& p : params_) n += p.numel() * p.element_size();
  return n;
}

std::string ZeroOptimizer::memory_summary() const {
  // Reads only what is fixed at construction and the atomic state_bytes_: the report note
  // may run on another thread than step().
  auto size = [](int64_t bytes) { return memory::format_size(static_cast<std::size_t>(bytes)); };
  const int64_t state = state_bytes(), full_state = full_state_bytes();
  const int64_t grads = gradient_bytes(), full_grads = full_gradient_bytes();
  std::ostringstream os;
  os << "ZeRO-" << stage_ << " over " << pg_.size() << " ranks: optimizer state on this rank ";
  if (state == 0) os << "none yet (it is made at the first step)";
  else os << size(state) << " of " << size(full_state) << " unsharded";
  os << ", gradients after backward " << size(grads) << " of " << size(full_grads);
  const int64_t saved = full_state + full_grads - state - grads;
  if (saved > 0) os << "; " << size(saved) << " saved on this rank";
  return os.str();
}

}  // namespace ember::comm
