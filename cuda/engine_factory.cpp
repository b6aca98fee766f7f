#include "cuda/engine_factory.hpp"

#include "cuda/manual_copy_engine.hpp"
#include "cuda/sim_copy_engine.hpp"
#ifdef KVC_HAVE_CUDA_BACKEND
#include "cuda/cuda_copy_engine.hpp"
#endif

namespace kvc::cuda {

result<std::unique_ptr<copy_engine>> make_copy_engine(const engine_options& opts) {
  if (opts.device < 0) {
    return make_error(errc::invalid_argument,
                      "copy engine: device must be >= 0, got " + std::to_string(opts.device));
  }
  if (opts.backend == "sim") return std::unique_ptr<copy_engine>(new sim_copy_engine());
  if (opts.backend == "manual") return std::unique_ptr<copy_engine>(new manual_copy_engine());
  if (opts.backend == "cuda") {
#ifdef KVC_HAVE_CUDA_BACKEND
    return cuda_copy_engine::create(opts);
#else
    return make_error(errc::device_unavailable,
                      "copy engine: backend \"cuda\" is not built into this binary "
                      "(configure with KVC_WITH_CUDA=ON and nvcc available)");
#endif
  }
  std::string built;
  for (const std::string& b : built_backends()) built += (built.empty() ? "" : ", ") + b;
  return make_error(errc::invalid_argument,
                    "copy engine: unknown backend \"" + opts.backend + "\" (built: " + built + ")");
}

std::vector<std::string> built_backends() {
#ifdef KVC_HAVE_CUDA_BACKEND
  return {"sim", "manual", "cuda"};
#else
  return {"sim", "manual"};
#endif
}

}  // namespace kvc::cuda
