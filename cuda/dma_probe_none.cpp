// dma_probe without the CUDA backend: every probe is refused, saying why.
#include "cuda/dma_probe.hpp"

namespace kvc::cuda {

result<dma_probe_result> run_dma_probe(const dma_probe_options&) {
  return make_error(errc::device_unavailable,
                    "dma_probe: this build has no CUDA backend (KVC_HAVE_CUDA off)");
}

}  // namespace kvc::cuda
