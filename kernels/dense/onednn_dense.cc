// y[M, N] = activation(x[M, K] @ w[K, N] + bias[N]) on oneDNN's matmul primitive: an XLA FFI
// handler for CPU (kernels/dense/_onednn.py builds and registers it).
//
// x and w are bfloat16, accumulation is float32, and bias, activation and the rounding to y's
// dtype (float32 or bfloat16) are applied to the float32 accumulator, as oneDNN's post-ops.
// oneDNN runs it on the CPU's bfloat16 dot instructions (avx512_bf16, AMX), with the bias, the
// activation and a bfloat16 result fused into the one call (docs/accelerators.md).
//
// Each XLA device thread calls in with `threads` of the cores: the OpenMP team size is a
// setting of the calling thread, so devices side by side do not oversubscribe the cores.
// A primitive is built once per problem, in a cache of the calling thread, so no primitive or
// its scratchpad is ever shared between threads.

#include <omp.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>

#include "oneapi/dnnl/dnnl.hpp"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

// M, K, N, y is bfloat16, activation (oneDNN algorithm, or 0 for none), threads.
using Problem = std::tuple<int64_t, int64_t, int64_t, bool, int, int64_t>;

struct Primitive {
  dnnl::matmul matmul;
  dnnl::memory::desc x, w, bias, y;
};

dnnl::engine& Engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// The activations of kernels/encoders/_config.py's ACTIVATIONS, by the names _onednn.py passes.
bool Activation(std::string_view name, dnnl::algorithm* algorithm) {
  static const std::map<std::string_view, dnnl::algorithm> known = {
      {"gelu", dnnl::algorithm::eltwise_gelu_erf},
      {"gelu_tanh", dnnl::algorithm::eltwise_gelu_tanh},
      {"relu", dnnl::algorithm::eltwise_relu},
      {"silu", dnnl::algorithm::eltwise_swish},
  };
  if (name == "none") {
    *algorithm = dnnl::algorithm::undef;
    return true;
  }
  auto found = known.find(name);
  if (found == known.end()) return false;
  *algorithm = found->second;
  return true;
}

const Primitive& PrimitiveFor(const Problem& problem) {
  thread_local std::map<Problem, std::unique_ptr<Primitive>> cache;
  auto found = cache.find(problem);
  if (found != cache.end()) return *found->second;
  auto [m, k, n, y_bf16, activation, threads] = problem;
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  dnnl::memory::desc x({m, k}, dt::bf16, tag::ab), w({k, n}, dt::bf16, tag::ab), bias({1, n}, dt::f32, tag::ab),
      y({m, n}, y_bf16 ? dt::bf16 : dt::f32, tag::ab);
  dnnl::primitive_attr attr;
  if (activation) {
    dnnl::post_ops ops;
    auto algorithm = static_cast<dnnl::algorithm>(activation);
    // alpha is swish's beta (1: x * sigmoid(x), SiLU) and relu's negative slope (0).
    ops.append_eltwise(algorithm, algorithm == dnnl::algorithm::eltwise_swish ? 1.f : 0.f, 0.f);
    attr.set_post_ops(ops);
  }
  dnnl::matmul::primitive_desc pd(Engine(), x, w, bias, y, attr);
  auto made = std::make_unique<Primitive>(Primitive{dnnl::matmul(pd), x, w, bias, y});
  return *cache.emplace(problem, std::move(made)).first->second;
}

ffi::Error Dense(ffi::Buffer<ffi::BF16> x, ffi::Buffer<ffi::BF16> w, ffi::Buffer<ffi::F32> bias,
                 ffi::Result<ffi::AnyBuffer> y, std::string_view activation, int64_t threads) {
  auto xd = x.dimensions(), wd = w.dimensions(), bd = bias.dimensions(), yd = y->dimensions();
  if (xd.size() != 2 || wd.size() != 2 || xd[1] != wd[0]) {
    return ffi::Error::InvalidArgument("dense takes x[M, K] and w[K, N]");
  }
  if (bd.size() != 1 || bd[0] != wd[1] || yd.size() != 2 || yd[0] != xd[0] || yd[1] != wd[1]) {
    return ffi::Error::InvalidArgument("dense takes bias[N] and returns y[M, N]");
  }
  auto y_type = y->element_type();
  if (y_type != ffi::DataType::F32 && y_type != ffi::DataType::BF16) {
    return ffi::Error::InvalidArgument("dense returns float32 or bfloat16");
  }
  dnnl::algorithm algorithm;
  if (!Activation(activation, &algorithm)) {
    return ffi::Error::InvalidArgument("dense has no activation " + std::string(activation));
  }
  if (xd[0] == 0) return ffi::Error::Success();
  omp_set_num_threads(static_cast<int>(threads));
  try {
    const Primitive& p =
        PrimitiveFor({xd[0], xd[1], wd[1], y_type == ffi::DataType::BF16, static_cast<int>(algorithm), threads});
    dnnl::engine& engine = Engine();
    dnnl::stream stream(engine);
    dnnl::memory xm(p.x, engine, x.typed_data()), wm(p.w, engine, w.typed_data()),
        bm(p.bias, engine, bias.typed_data()), ym(p.y, engine, y->untyped_data());
    p.matmul.execute(stream, {{DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_BIAS, bm}, {DNNL_ARG_DST, ym}});
    stream.wait();
  } catch (const dnnl::error& e) {
    return ffi::Error::Internal(e.what());
  }
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(DocembedDense, Dense,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::BF16>>()
                                  .Arg<ffi::Buffer<ffi::BF16>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<std::string_view>("activation")
                                  .Attr<int64_t>("threads"));
