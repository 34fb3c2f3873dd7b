// PyTorch reference cases of issue 30's vision ops and layers (vision.safetensors, from
// tests/refcases/vision_twin.py, float64): conv_transpose2d, interpolate, pixel_shuffle /
// unshuffle, group_norm and instance_norm (with the running statistics after the step),
// and the layers ConvTranspose2d, GroupNorm, Upsample and InstanceNorm2d loaded with the
// twin's parameters: each output and every gradient at the README's float64 tolerances.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "tests/core/refcase_util.h"

namespace ember::test {
namespace {

using namespace refcase;  // NOLINT

void load_into(const Tensor& param, const Tensor& value) {
  NoGradGuard no_grad;
  param.copy_(value);
}

TEST(VisionRefcases, MatchPyTorch) {
  const RefFile f = load("vision.safetensors", 26);
  int64_t checked = 0;
  for (int64_t i = 0; i < f.num_cases; ++i) {
    const json m = f.meta(i);
    SCOPED_TRACE("case " + std::to_string(i) + ": " + m.dump());
    std::map<std::string, Tensor> in;
    for (const char* name : {"x", "weight", "bias", "running_mean", "running_var"})
      if (f.has(i, std::string("in.") + name)) in[name] = f.field(i, std::string("in.") + name);
    const std::string op = m.at("op");
    // The layers hold their own parameters: the twin's values are loaded into them.
    std::shared_ptr<nn::Module> layer;
    std::map<std::string, Tensor> params;
    if (op == "ConvTranspose2d") {
      const auto k = [&](const char* key) { return m.at(key).get<int64_t>(); };
      auto l = std::make_shared<nn::ConvTranspose2d>(
          k("in"), k("out"), Pair{k("kernel"), k("kernel")},
          nn::ConvTranspose2dOptions{.stride = {k("stride"), k("stride")},
                                     .padding = {k("padding"), k("padding")},
                                     .output_padding = {k("output_padding"), k("output_padding")},
                                     .groups = k("groups")});
      params = {{"weight", l->weight}, {"bias", l->bias}};
      layer = l;
    } else if (op == "GroupNorm") {
      auto l = std::make_shared<nn::GroupNorm>(m.at("groups").get<int64_t>(), m.at("channels").get<int64_t>());
      params = {{"weight", l->weight}, {"bias", l->bias}};
      layer = l;
    } else if (op == "InstanceNorm2d") {
      auto l = std::make_shared<nn::InstanceNorm2d>(
          m.at("features").get<int64_t>(), nn::InstanceNormOptions{.momentum = m.at("momentum").get<double>(),
                                                                   .affine = true, .track_running_stats = true});
      params = {{"weight", l->weight}, {"bias", l->bias}};
      layer = l;
    } else if (op == "Upsample") {
      layer = std::make_shared<nn::Upsample>(
          InterpolateOptions{.scale_factor = std::pair{2.0, 2.0}, .mode = InterpolateMode::kBilinear});
    }
    if (layer) {
      layer->to(kFloat64);
      layer->to(default_device());
      for (auto& [name, p] : params) {
        load_into(p, in.at(name));
        in[name] = p;
      }
    }
    for (const auto& g : m.at("grads")) in[g.get<std::string>()].requires_grad_();
    Tensor out;
    if (layer) {
      out = (*layer)(in["x"]);
    } else if (op == "conv_transpose2d") {
      out = conv_transpose2d(in["x"], in["weight"], in["bias"], pair_of(m.at("stride")), pair_of(m.at("padding")),
                             pair_of(m.at("output_padding")), m.at("groups"), pair_of(m.at("dilation")));
    } else if (op == "interpolate") {
      InterpolateOptions o;
      if (!m.at("size").is_null()) o.size = pair_of(m.at("size"));
      if (!m.at("scale_factor").is_null()) {
        const auto s = m.at("scale_factor").get<std::vector<double>>();
        o.scale_factor = std::pair{s.at(0), s.at(1)};
      }
      o.mode = m.at("mode") == "bilinear" ? InterpolateMode::kBilinear : InterpolateMode::kNearest;
      o.align_corners = m.at("align_corners");
      out = interpolate(in["x"], o);
    } else if (op == "pixel_shuffle") {
      out = pixel_shuffle(in["x"], m.at("factor"));
    } else if (op == "pixel_unshuffle") {
      out = pixel_unshuffle(in["x"], m.at("factor"));
    } else if (op == "group_norm") {
      out = group_norm(in["x"], m.at("groups"), in["weight"], in["bias"], m.at("eps"));
    } else if (op == "instance_norm") {
      out = instance_norm(in["x"], in["running_mean"], in["running_var"], in["weight"], in["bias"], true,
                          m.at("momentum"), m.at("eps"));
    } else if (op == "instance_norm_eval") {
      out = instance_norm(in["x"], in["running_mean"], in["running_var"], {}, {}, false, 0.1, m.at("eps"));
    } else {
      FAIL() << "unknown op " << op;
    }
    const Tol tol{1e-8, 1e-10};
    EXPECT_TRUE(matches(out, f.field(i, "out"), tol));
    if (f.has(i, "after.running_mean")) {
      const auto* norm = dynamic_cast<nn::InstanceNorm2d*>(layer.get());
      EXPECT_TRUE(matches(norm ? norm->running_mean : in["running_mean"], f.field(i, "after.running_mean"), tol));
      EXPECT_TRUE(matches(norm ? norm->running_var : in["running_var"], f.field(i, "after.running_var"), tol));
    }
    if (m.at("grads").empty()) continue;
    checked += expect_listed_grads(f, i, m, out, in, tol);
  }
  EXPECT_EQ(checked, 47);
}

}  // namespace
}  // namespace ember::test
