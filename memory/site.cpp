#include "memory/site.h"

#include <algorithm>

namespace ember::memory {
namespace {
thread_local AllocationSite tls_site;
thread_local StepInfo tls_step;
}  // namespace

std::string AllocationSite::shape_str() const {
  if (ndim < 0) return "";
  std::string s = "[";
  for (int i = 0; i < std::min(ndim, kMaxDims); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  if (ndim > kMaxDims) s += ", ...";
  return s + "]";
}

std::string AllocationSite::op_name() const {
  if (!op) return "(unnamed)";
  return backward ? std::string(op) + " backward" : std::string(op);
}

SiteScope::SiteScope(const char* op, const int64_t* shape, int ndim, bool backward) : saved_(tls_site) {
  // Inside a backward formula the ops it calls keep the formula's name: "conv2d backward"
  // says more than the matmul it runs.
  if (!saved_.backward || backward) {
    tls_site.op = op;
    tls_site.backward = backward;
  }
  tls_site.ndim = shape ? ndim : -1;
  for (int i = 0; shape && i < std::min(ndim, AllocationSite::kMaxDims); ++i) tls_site.shape[i] = shape[i];
}

SiteScope::SiteScope(const AllocationSite& site) : saved_(tls_site) { tls_site = site; }

SiteScope::~SiteScope() { tls_site = saved_; }

const AllocationSite& current_site() { return tls_site; }

StepScope::StepScope(int64_t batch, std::size_t allocated_at_start) : saved_(tls_step) {
  tls_step = {batch, allocated_at_start};
}

StepScope::~StepScope() { tls_step = saved_; }

const StepInfo& current_step() { return tls_step; }

}  // namespace ember::memory
