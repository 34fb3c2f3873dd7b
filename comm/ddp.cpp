// DistributedDataParallel (comm/ddp.h; Note [DDP step] there).
#include "comm/ddp.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <unordered_set>

#include "base/error.h"
#include "core/autograd.h"
#include "core/autograd_graph.h"  // find_unused_parameters walks the recorded graph
#include "core/ops.h"

namespace ember::comm {

std::shared_ptr<Work> allreduce_hook(ProcessGroup& pg, const Tensor& bucket) {
  return pg.all_reduce(bucket, ReduceOp::kAvg);
}

std::shared_ptr<Work> bf16_compress_hook(ProcessGroup& pg, const Tensor& bucket) {
  Tensor compressed = bucket.to(kBFloat16);
  if (compressed.shares_storage_with(bucket)) compressed = compressed.clone();  // a bf16 bucket: nothing to save
  auto work = pg.all_reduce(compressed, ReduceOp::kAvg);
  return Work::then(work, [compressed, bucket] {
    NoGradGuard no_grad;
    bucket.copy_(compressed);
  });
}

std::function<int64_t(int64_t)> min_over_ranks(std::shared_ptr<ProcessGroup> pg) {
  return [pg](int64_t proposal) {
    Tensor t = tensor({static_cast<double>(proposal)}, kInt64);
    pg->all_reduce(t, ReduceOp::kMin)->wait();
    return t.item<int64_t>();
  };
}

std::vector<std::vector<size_t>> assign_buckets(const std::vector<Tensor>& params, int64_t first_bucket_bytes,
                                                int64_t bucket_cap_bytes) {
  EMBER_CHECK(first_bucket_bytes > 0 && bucket_cap_bytes > 0, "DistributedDataParallel: bucket sizes must be ",
              "positive, got first_bucket_bytes=", first_bucket_bytes, " bucket_cap_bytes=", bucket_cap_bytes);
  struct Open {
    std::vector<size_t> params;
    int64_t bytes = 0;
    int64_t limit;
  };
  std::map<std::pair<int, int>, Open> open;  // by (dtype, device)
  std::vector<std::vector<size_t>> closed;
  for (size_t k = params.size(); k-- > 0;) {
    const Tensor& p = params[k];
    const Device d = p.device();
    const std::pair<int, int> key{static_cast<int>(p.dtype()), static_cast<int>(d.type) * 1024 + d.index};
    auto it = open.find(key);
    if (it == open.end()) it = open.emplace(key, Open{{}, 0, first_bucket_bytes}).first;
    it->second.params.push_back(k);
    it->second.bytes += p.numel() * p.element_size();
    if (it->second.bytes >= it->second.limit) {
      closed.push_back(std::move(it->second.params));
      it->second = Open{{}, 0, bucket_cap_bytes};
    }
  }
  for (auto& [key, o] : open)
    if (!o.params.empty()) closed.push_back(std::move(o.params));
  // In the order backward reaches them: by the latest-registered parameter each holds.
  std::stable_sort(closed.begin(), closed.end(), [](const auto& a, const auto& b) { return a[0] > b[0]; });
  return closed;
}

struct DistributedDataParallel::Impl {
  ProcessGroup* pg;
  DdpOptions opt;
  std::vector<std::string> names;
  std::vector<Tensor> params;
  struct Bucket {
    std::vector<size_t> params;
    Tensor buffer;             // flat
    std::vector<Tensor> views;  // one per parameter, in its shape
  };
  std::vector<Bucket> buckets;
  std::vector<size_t> bucket_of, slot_of;
  std::vector<bool> ready;
  std::vector<int64_t> pending;
  size_t next_launch = 0;
  std::vector<std::shared_ptr<Work>> works;
  int64_t hooks_run = 0;
  std::vector<int64_t> log, last_log;
  bool in_iteration = false;
  bool sync = true;
  DistributedDataParallel::Sharding sharding;
  std::mutex mu;

  // Bucket b's buffer (zero-padded to Sharding::pad_to) and views, made when missing: at
  // construction, and per iteration under Sharding::release_buffers.
  void ensure_buffer(size_t b) {
    Bucket& bucket = buckets[b];
    if (bucket.buffer.defined()) return;
    int64_t numel = 0;
    for (size_t i : bucket.params) numel += params[i].numel();
    const int64_t pad = sharding.pad_to;
    const Tensor& p0 = params[bucket.params[0]];
    bucket.buffer = zeros({(numel + pad - 1) / pad * pad}, TensorOptions(p0.dtype(), p0.device()));
    bucket.views.clear();
    int64_t offset = 0;
    for (size_t i : bucket.params) {
      bucket.views.push_back(bucket.buffer.narrow(0, offset, params[i].numel()).view(params[i].shape()));
      offset += params[i].numel();
    }
  }

  const Tensor& view_of(size_t i) {
    ensure_buffer(bucket_of[i]);
    return buckets[bucket_of[i]].views[slot_of[i]];
  }

  // The gradient into its bucket slot (the one copy); grad() becomes the slot.
  void move_into_slot(size_t i, bool allow_missing) {
    const Tensor& view = view_of(i);
    Tensor g = params[i].grad();
    NoGradGuard no_grad;
    if (!g.defined()) {
      EMBER_CHECK(allow_missing, "DistributedDataParallel: parameter '", names[i], "' has no gradient on rank ",
                  pg->rank(), " (it took no part in the loss; pass find_unused_parameters = true if that is meant)");
      view.zero_();
    } else if (g.data_ptr() != view.data_ptr()) {
      view.copy_(g);
    }
    params[i].set_grad(view);
  }

  void mark_ready(size_t i) {
    EMBER_CHECK(!ready[i], "DistributedDataParallel: parameter '", names[i], "' got a second gradient in one ",
                "iteration on rank ", pg->rank(), " (accumulate inside no_sync(), or call backward once per forward)");
    in_iteration = true;
    ready[i] = true;
    --pending[bucket_of[i]];
    while (next_launch < buckets.size() && pending[next_launch] == 0) {
      log.push_back(hooks_run);
      const Tensor& buffer = buckets[next_launch].buffer;
      works.push_back(sharding.exchange ? sharding.exchange(next_launch, buffer) : opt.comm_hook(*pg, buffer));
      if (sharding.release_buffers) {  // the collective holds the buffer until it is done
        for (size_t i : buckets[next_launch].params) params[i].set_grad({});
        buckets[next_launch].buffer = Tensor();
        buckets[next_launch].views.clear();
      }
      ++next_launch;
    }
  }

  std::string unready() const {
    std::string s;
    int n = 0;
    for (size_t i = 0; i < params.size(); ++i)
      if (!ready[i] && n++ < 10) s += (s.empty() ? "'" : ", '") + names[i] + "'";
    if (n > 10) s += ", ... (" + std::to_string(n) + " in all)";
    return s;
  }

  void reset() {
    std::fill(ready.begin(), ready.end(), false);
    for (size_t b = 0; b < buckets.size(); ++b) pending[b] = static_cast<int64_t>(buckets[b].params.size());
    next_launch = 0;
    works.clear();
    hooks_run = 0;
    last_log = std::move(log);
    log.clear();
    in_iteration = false;
  }

  // Waits for every bucket; grads are then the averaged slots.
  void finish() {
    std::exception_ptr error;
    for (auto& w : works) {
      try {
        w->wait(pg->timeout());
      } catch (...) {
        if (!error) error = std::current_exception();
      }
    }
    if (!error && !sharding.release_buffers)
      for (size_t i = 0; i < params.size(); ++i) params[i].set_grad(view_of(i));
    reset();
    if (error) std::rethrow_exception(error);
  }

  void on_grad(size_t i) {
    std::lock_guard lock(mu);
    if (!sync) return;
    ++hooks_run;
    move_into_slot(i, false);
    mark_ready(i);
    if (next_launch == buckets.size()) finish();
  }

  // Parameters not yet ready: ready as they are (find_unused_parameters) or an error naming them.
  void complete_missing(const char* where) {
    if (!opt.find_unused_parameters) {
      const std::string missing = unready();
      // Let the buckets already issued finish, so the group stays usable for the error's report.
      for (auto& w : works) try {
          w->wait(pg->timeout());
        } catch (...) {
        }
      reset();
      EMBER_FAIL("DistributedDataParallel (", where, "): on rank ", pg->rank(), " these parameters got no gradient ",
                 "in the last backward: ", missing, ". Every parameter must take part in the loss on every rank, ",
                 "or pass find_unused_parameters = true");
    }
    for (size_t i = 0; i < params.size(); ++i)
      if (!ready[i]) {
        move_into_slot(i, true);  // what no_sync() passes accumulated, else zeros
        mark_ready(i);
      }
  }
};

namespace {

std::string describe(const nn::Module& m) {
  std::ostringstream os;
  for (const auto& [name, t] : m.named_parameters())
    os << "parameter\t" << name << "\t" << shape_str(t.shape()) << " " << dtype_name(t.dtype()) << "\n";
  for (const auto& [name, t] : m.named_buffers())
    os << "buffer\t" << name << "\t" << shape_str(t.shape()) << " " << dtype_name(t.dtype()) << "\n";
  return os.str();
}

// "kind\tname" -> "shape dtype", in registration order
using Entries = std::vector<std::pair<std::string, std::string>>;
Entries parse(const std::string& d) {
  Entries out;
  std::istringstream in(d);
  std::string line;
  while (std::getline(in, line)) {
    const size_t t2 = line.find('\t', line.find('\t') + 1);
    out.emplace_back(line.substr(0, t2), line.substr(t2 + 1));
  }
  return out;
}

std::string first_difference(const std::string& d0, const std::string& dr, int r) {
  auto a = parse(d0), b = parse(dr);
  auto pretty = [](const std::string& k) {
    const size_t t = k.find('\t');
    return k.substr(0, t) + " '" + k.substr(t + 1) + "'";
  };
  auto find = [](const Entries& e, const std::string& k) {
    return std::find_if(e.begin(), e.end(), [&](const auto& kv) { return kv.first == k; });
  };
  for (const auto& [k, v] : a) {
    auto it = find(b, k);
    if (it == b.end()) return pretty(k) + " exists on rank 0 but not on rank " + std::to_string(r);
    if (it->second != v) return pretty(k) + " is " + v + " on rank 0 but " + it->second + " on rank " + std::to_string(r);
  }
  for (const auto& [k, v] : b)
    if (find(a, k) == a.end()) return pretty(k) + " exists on rank " + std::to_string(r) + " but not on rank 0";
  return "the order of the parameters differs between rank 0 and rank " + std::to_string(r);
}

// Rank 0's values into t on every rank.
std::shared_ptr<Work> broadcast_into(ProcessGroup& pg, const Tensor& t, std::vector<std::function<void()>>& after) {
  if (t.is_contiguous()) return pg.broadcast(t.detach(), 0);
  Tensor tmp = t.detach().contiguous();
  after.push_back([t, tmp] {
    NoGradGuard no_grad;
    t.detach().copy_(tmp);
  });
  return pg.broadcast(tmp, 0);
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module, std::shared_ptr<ProcessGroup> pg,
                                                 DdpOptions options)
    : module_(std::move(module)), pg_(std::move(pg)), impl_(std::make_shared<Impl>()) {
  EMBER_CHECK(module_ != nullptr, "DistributedDataParallel: no module");
  EMBER_CHECK(pg_ != nullptr, "DistributedDataParallel: no process group");
  EMBER_CHECK(options.comm_hook != nullptr, "DistributedDataParallel: comm_hook is empty");
  Impl& im = *impl_;
  im.pg = pg_.get();
  im.opt = std::move(options);

  // Same parameters and buffers on every rank?
  Store& store = pg_->store();
  const std::string key = pg_->next_key("ddp") + "/model/";
  const std::string mine = describe(*module_);
  store.set(key + std::to_string(pg_->rank()), mine);
  std::vector<std::string> keys;
  for (int r = 0; r < pg_->size(); ++r) keys.push_back(key + std::to_string(r));
  store.wait(keys, pg_->timeout());
  const std::string first = store.get(keys[0]);
  for (int r = 1; r < pg_->size(); ++r) {
    const std::string d = r == pg_->rank() ? mine : store.get(keys[r]);
    if (d != first) EMBER_FAIL("DistributedDataParallel: the ranks' models differ: ", first_difference(first, d, r));
  }

  // Rank 0's parameters and buffers everywhere.
  std::vector<std::shared_ptr<Work>> works;
  std::vector<std::function<void()>> after;
  for (const auto& [name, t] : module_->named_parameters()) {
    im.names.push_back(name);
    im.params.push_back(t);
    works.push_back(broadcast_into(*pg_, t, after));
  }
  for (const auto& [name, t] : module_->named_buffers()) works.push_back(broadcast_into(*pg_, t, after));
  for (auto& w : works) w->wait(pg_->timeout());
  for (auto& f : after) f();

  // Buckets and their views.
  const auto assignment = assign_buckets(im.params, im.opt.first_bucket_bytes, im.opt.bucket_cap_bytes);
  im.bucket_of.resize(im.params.size());
  im.slot_of.resize(im.params.size());
  for (size_t b = 0; b < assignment.size(); ++b) {
    im.buckets.push_back({assignment[b], Tensor(), {}});
    for (size_t s = 0; s < assignment[b].size(); ++s) {
      im.bucket_of[assignment[b][s]] = b;
      im.slot_of[assignment[b][s]] = s;
    }
    im.ensure_buffer(b);
  }
  im.ready.assign(im.params.size(), false);
  im.pending.assign(im.buckets.size(), 0);
  im.reset();

  std::weak_ptr<Impl> weak = impl_;
  for (size_t i = 0; i < im.params.size(); ++i)
    im.params[i].register_post_accumulate_grad_hook([weak, i](const Tensor&) {
      if (auto s = weak.lock()) s->on_grad(i);
    });
}

DistributedDataParallel::~DistributedDataParallel() = default;

Tensor DistributedDataParallel::forward(const Tensor& x) {
  Impl& im = *impl_;
  {
    std::lock_guard lock(im.mu);
    if (im.in_iteration && im.sync) im.complete_missing("forward");
    if (im.in_iteration && im.next_launch == im.buckets.size()) im.finish();
  }
  Tensor out = module_->one_tensor_forward(x);
  if (im.opt.find_unused_parameters && im.sync && grad_enabled() && out.requires_grad()) {
    // The accumulators the graph reaches; the parameters whose accumulator it does not
    // reach get no gradient in this backward: ready now, with the gradient they hold
    // (accumulated under no_sync) or zeros.
    std::unordered_set<const autograd::Node*> seen;
    std::vector<autograd::Node*> stack;
    if (auto& meta = out.impl().autograd; meta && meta->grad_fn) stack.push_back(meta->grad_fn.get());
    while (!stack.empty()) {
      autograd::Node* n = stack.back();
      stack.pop_back();
      if (!seen.insert(n).second) continue;
      for (const auto& e : n->next)
        if (e.node) stack.push_back(e.node.get());
    }
    std::lock_guard lock(im.mu);
    for (size_t i = 0; i < im.params.size(); ++i) {
      const auto& meta = im.params[i].impl().autograd;
      auto acc = meta ? meta->grad_accumulator.lock() : nullptr;
      if (acc && seen.count(acc.get())) continue;
      im.move_into_slot(i, true);  // what no_sync() passes accumulated, else zeros
      im.mark_ready(i);
    }
    if (im.next_launch == im.buckets.size()) im.finish();  // nothing at all is used
  }
  return out;
}

void DistributedDataParallel::synchronize() {
  Impl& im = *impl_;
  std::lock_guard lock(im.mu);
  if (!im.in_iteration) return;
  im.complete_missing("synchronize");
  im.finish();
}

void DistributedDataParallel::sync_gradients() {
  Impl& im = *impl_;
  std::lock_guard lock(im.mu);
  EMBER_CHECK(!im.in_iteration, "DistributedDataParallel::sync_gradients: an exchange is already under way (",
              "call it after backward passes run inside no_sync())");
  for (size_t i = 0; i < im.params.size(); ++i) im.move_into_slot(i, im.opt.find_unused_parameters);
  for (size_t i = 0; i < im.params.size(); ++i) im.mark_ready(i);
  im.finish();
}

DistributedDataParallel::NoSync::NoSync(DistributedDataParallel& ddp) : ddp_(ddp) {
  std::lock_guard lock(ddp_.impl_->mu);
  ddp_.impl_->sync = false;
}

DistributedDataParallel::NoSync::~NoSync() {
  std::lock_guard lock(ddp_.impl_->mu);
  ddp_.impl_->sync = true;
}

std::vector<std::vector<size_t>> DistributedDataParallel::buckets() const {
  std::vector<std::vector<size_t>> out;
  for (const auto& b : impl_->buckets) out.push_back(b.params);
  return out;
}

std::vector<int64_t> DistributedDataParallel::launch_log() const { return impl_->last_log; }

void DistributedDataParallel::set_sharding(Sharding s) {
  Impl& im = *impl_;
  std::lock_guard lock(im.mu);
  EMBER_CHECK(s.pad_to >= 1, "DistributedDataParallel::set_sharding: pad_to must be >= 1, got ", s.pad_to);
  EMBER_CHECK(!im.in_iteration, "DistributedDataParallel::set_sharding: a gradient exchange is under way");
  im.sharding = std::move(s);
  for (size_t b = 0; b < im.buckets.size(); ++b) {
    im.buckets[b].buffer = Tensor();
    if (!im.sharding.release_buffers) im.ensure_buffer(b);
  }
  for (const Tensor& p : im.params) p.set_grad({});  // they may be views of the old buffers
}

std::vector<Tensor> DistributedDataParallel::bucket_buffers() const {
  std::vector<Tensor> out;
  for (const auto& b : impl_->buckets) out.push_back(b.buffer);
  return out;
}

}  // namespace ember::comm
