// y[M, N] = x[M, K] @ w[K, N] in bfloat16 with float32 accumulation, on oneDNN's
// matmul primitive, with `gelu` the exact (erf) GELU of it applied as oneDNN
// computes it, a post-op on the accumulator: an XLA FFI handler for CPU
// (bench/onednn_matmul.py).
//
// XLA:CPU computes every bfloat16 dot in float32 (docs/accelerators.md); oneDNN
// runs it on the CPU's bfloat16 dot instructions (avx512_bf16, AMX) where
// they exist. Each XLA device thread calls in with `threads` of the cores: the
// OpenMP team size is a per-thread setting, so devices do not oversubscribe.
// A primitive is built once per shape, thread count and post-op, in a cache of the
// calling thread, so no primitive or its scratchpad is ever shared between threads.

#include <omp.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "oneapi/dnnl/dnnl.hpp"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

using Shape = std::tuple<int64_t, int64_t, int64_t, int64_t, bool>;  // M, K, N, threads, gelu

struct Cached {
  dnnl::matmul primitive;
  dnnl::memory::desc x, w, y;
};

dnnl::engine& Engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

const Cached& PrimitiveFor(const Shape& shape) {
  thread_local std::map<Shape, std::unique_ptr<Cached>> cache;
  auto found = cache.find(shape);
  if (found != cache.end()) return *found->second;
  auto [m, k, n, threads, gelu] = shape;
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  dnnl::memory::desc x({m, k}, dt::bf16, tag::ab), w({k, n}, dt::bf16, tag::ab), y({m, n}, dt::bf16, tag::ab);
  dnnl::post_ops ops;
  if (gelu) ops.append_eltwise(dnnl::algorithm::eltwise_gelu_erf, 0.f, 0.f);
  dnnl::primitive_attr attr;
  attr.set_post_ops(ops);
  dnnl::matmul::primitive_desc pd(Engine(), x, w, y, attr);
  auto cached = std::make_unique<Cached>(Cached{dnnl::matmul(pd), x, w, y});
  return *cache.emplace(shape, std::move(cached)).first->second;
}

ffi::Error MatmulBf16(ffi::Buffer<ffi::BF16> x, ffi::Buffer<ffi::BF16> w, ffi::ResultBuffer<ffi::BF16> y,
                      int64_t threads, bool gelu) {
  auto xd = x.dimensions(), wd = w.dimensions();
  if (xd.size() != 2 || wd.size() != 2 || xd[1] != wd[0]) {
    return ffi::Error::InvalidArgument("matmul takes x[M, K] and w[K, N]");
  }
  omp_set_num_threads(static_cast<int>(threads));
  try {
    const Cached& c = PrimitiveFor({xd[0], xd[1], wd[1], threads, gelu});
    dnnl::engine& engine = Engine();
    dnnl::stream stream(engine);
    dnnl::memory xm(c.x, engine, x.typed_data()), wm(c.w, engine, w.typed_data()), ym(c.y, engine, y->typed_data());
    c.primitive.execute(stream, {{DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, ym}});
    stream.wait();
  } catch (const dnnl::error& e) {
    return ffi::Error::Internal(e.what());
  }
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(DocembedMatmulBf16, MatmulBf16,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::BF16>>()
                                  .Arg<ffi::Buffer<ffi::BF16>>()
                                  .Ret<ffi::Buffer<ffi::BF16>>()
                                  .Attr<int64_t>("threads")
                                  .Attr<bool>("gelu"));
