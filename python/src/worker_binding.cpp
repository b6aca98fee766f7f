// kvconnect.WorkerConnector: embed::worker_connector for Python (docs/python.md). KV tensors come
// from any object with data_ptr(), shape, stride() and element_size() (torch), without a
// build-time torch dependency; the binding keeps them alive as long as the connector. Every call
// that can wait releases the GIL.
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "actors/embed/worker_connector.hpp"
#include "launch/config/launch_plan.hpp"
#include "python/src/bindings.hpp"
#include "python/src/errors.hpp"

namespace kvc::python {
namespace py = pybind11;

namespace {

using embed::worker_connector;

std::chrono::nanoseconds seconds_of(double s) {
  if (!(s >= 0)) throw py::value_error("a timeout must be >= 0 seconds");
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(s));
}

/// The dim of `shape` that indexes the GPU blocks: the one of size num_blocks; with a leading
/// K/V dim of 2 and num_blocks == 2, dim 1 (FlashAttention's (2, num_blocks, ...)).
int block_dim_of(const std::vector<int64_t>& shape, int64_t num_blocks) {
  if (shape.size() >= 2 && shape[0] == 2 && shape[1] == num_blocks) return 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == num_blocks) return static_cast<int>(d);
  }
  throw py::value_error(
      "a KV tensor has no dimension of num_blocks = " + std::to_string(num_blocks) + " (shape " +
      std::string(py::str(py::cast(shape))) + ")");
}

/// A KV tensor's address, shape and byte strides (block_dim not set).
cuda::kv_tensor_desc describe_fields(py::handle t) {
  for (const char* attr : {"data_ptr", "shape", "stride", "element_size"}) {
    if (!py::hasattr(t, attr)) {
      type_error(std::string("a KV tensor needs data_ptr(), shape, stride() and element_size(); ") +
                 std::string(py::str(py::type::handle_of(t).attr("__name__"))) + " has no " + attr);
    }
  }
  cuda::kv_tensor_desc d;
  d.base = t.attr("data_ptr")().cast<uintptr_t>();
  d.shape = py::cast<std::vector<int64_t>>(py::tuple(t.attr("shape")));
  d.element_size = t.attr("element_size")().cast<uint64_t>();
  for (int64_t s : py::cast<std::vector<int64_t>>(py::tuple(t.attr("stride")()))) {
    d.strides.push_back(s * static_cast<int64_t>(d.element_size));
  }
  return d;
}

cuda::kv_tensor_desc describe(py::handle t, int64_t num_blocks) {
  cuda::kv_tensor_desc d = describe_fields(t);
  d.block_dim = block_dim_of(d.shape, num_blocks);
  return d;
}

/// vLLM's cross-layer KV cache: one C-contiguous tensor whose GPU block b is the bytes
/// [b * page, (b + 1) * page) of it, page = its bytes / num_blocks (every layer's K and V of the
/// block together; the caller checked that blocks are its outermost physical dimension).
cuda::kv_region cross_layer_region(py::handle t, int64_t num_blocks) {
  if (num_blocks <= 0) throw py::value_error("num_blocks must be > 0");
  const cuda::kv_tensor_desc d = describe_fields(t);
  int64_t expected = static_cast<int64_t>(d.element_size);
  uint64_t bytes = d.element_size;
  for (size_t i = d.shape.size(); i-- > 0;) {
    if (d.shape[i] != 1 && d.strides[i] != expected) {
      throw py::value_error("a cross-layer KV cache must be contiguous (shape " +
                            std::string(py::str(py::cast(d.shape))) + ", byte strides " +
                            std::string(py::str(py::cast(d.strides))) + ")");
    }
    expected *= d.shape[i];
    bytes *= static_cast<uint64_t>(d.shape[i]);
  }
  if (bytes == 0 || bytes % static_cast<uint64_t>(num_blocks) != 0) {
    throw py::value_error("a cross-layer KV cache of " + std::to_string(bytes) +
                          " bytes is not num_blocks = " + std::to_string(num_blocks) +
                          " blocks of whole bytes");
  }
  const uint64_t page = bytes / static_cast<uint64_t>(num_blocks);
  return {d.base, page, page};
}

class py_worker {
 public:
  py_worker(const config_handle& cfg, uint32_t rank, const std::optional<std::string>& instance,
            const std::optional<std::string>& token, const std::optional<std::string>& host,
            std::optional<uint16_t> port, uint32_t incarnation, bool create_or_attach)
      : step_timeout_(std::chrono::milliseconds{cfg.config.runtime.step_timeout_ms}) {
    const std::string inst = instance.value_or(cfg.config.runtime.instance);
    const std::string tok = token.value_or(cfg.config.runtime.token);
    if (inst.empty()) raise_config({{"runtime.instance", "names the node's segment: needed"}});
    if (tok.empty()) raise_config({{"runtime.token", "the deployment's shared secret: needed"}});
    auto plan = take(launch::make_plan(cfg.config, inst, tok, launch::config_use::engine));
    if (rank >= plan.workers.size()) {
      throw py::value_error("rank " + std::to_string(rank) + " is not below the world size " +
                            std::to_string(plan.workers.size()));
    }
    embed::worker_connector_config c = std::move(plan.workers[rank]);
    if (host) c.network.host = *host;
    if (port) c.network.port = *port;
    c.incarnation = incarnation;
    c.pool.create_or_attach = create_or_attach;
    c.faults = faults_at_site(cfg, fault_site::copy);
    for (const fault_spec& f : faults_at_site(cfg, fault_site::tier).specs) {
      c.faults.specs.push_back(f);
    }
    result<std::unique_ptr<worker_connector>> made = make_error(errc::internal, "");
    {
      py::gil_scoped_release unlocked;
      made = worker_connector::prepare(c);
    }
    wc_ = take(std::move(made));
  }

  ~py_worker() { close(); }

  void close() {
    if (!wc_) return;
    py::gil_scoped_release unlocked;  // ends the rank's actor and waits for it
    wc_.reset();
  }

  worker_connector& wc() {
    if (!wc_) raise(make_error(errc::precondition_failed, "the worker connector was closed"));
    return *wc_;
  }

  void register_kv_caches(const py::iterable& tensors, int64_t num_blocks) {
    std::vector<cuda::kv_tensor_desc> descs;
    py::list kept;
    for (auto t : tensors) {
      descs.push_back(describe(t, num_blocks));
      kept.append(t);
    }
    check(wc().register_kv_caches(descs));
    tensors_ = kept;  // the engine's memory stays alive while the connector may copy it
  }

  void register_cross_layers(py::handle tensor, int64_t num_blocks) {
    check(wc().register_kv_regions({cross_layer_region(tensor, num_blocks)},
                                   static_cast<uint64_t>(num_blocks)));
    py::list kept;
    kept.append(tensor);
    tensors_ = kept;  // the engine's memory stays alive while the connector may copy it
  }

  void register_in_background() { check(wc().register_in_background()); }

  void register_with_scheduler() {
    worker_connector& w = wc();
    status st;
    {
      py::gil_scoped_release unlocked;
      st = w.register_with_scheduler();
    }
    check(st);
  }

  step_id bind(std::optional<step_id> step, std::optional<double> timeout) {
    const auto wait = timeout ? seconds_of(*timeout) : step_timeout_;
    worker_connector& w = wc();
    result<step_id> got = make_error(errc::internal, "");
    {
      py::gil_scoped_release unlocked;
      if (step) {
        const status st = w.bind_connector_metadata(*step, wait);
        got = st ? result<step_id>(*step) : result<step_id>(st);
      } else {
        got = w.bind_next_connector_metadata(wait);
      }
    }
    return take(std::move(got));
  }

  void finish_transfers() {
    worker_connector& w = wc();
    status st;
    {
      py::gil_scoped_release unlocked;
      st = w.finish_transfers();
    }
    check(st);
  }

  void handle_preemptions() {
    worker_connector& w = wc();
    status st;
    {
      py::gil_scoped_release unlocked;  // waits for the flushed jobs
      st = w.handle_preemptions();
    }
    check(st);
  }

  py::tuple get_finished(const std::vector<std::string>& finished_req_ids) {
    auto f = wc().get_finished(finished_req_ids);
    return py::make_tuple(f.finished_sending, f.finished_recving, f.jobs);
  }

 private:
  std::unique_ptr<worker_connector> wc_;
  std::chrono::nanoseconds step_timeout_;
  py::list tensors_;
};

}  // namespace

void bind_worker(py::module_& m) {
  py::class_<py_worker>(m, "WorkerConnector",
                        "One rank's worker side (embed::worker_connector): the copy engine, the "
                        "pool's mapping, the step channel. One thread calls it.")
      .def(py::init<const config_handle&, uint32_t, const std::optional<std::string>&,
                    const std::optional<std::string>&, const std::optional<std::string>&,
                    std::optional<uint16_t>, uint32_t, bool>(),
           py::arg("config"), py::arg("rank"), py::kw_only(), py::arg("instance") = py::none(),
           py::arg("token") = py::none(), py::arg("host") = py::none(),
           py::arg("port") = py::none(), py::arg("incarnation") = 0,
           py::arg("create_or_attach") = false,
           "Prepares the rank (copy engine, the pool's segment: the scheduler side must have "
           "created it, unless create_or_attach) without registering it; then "
           "register_kv_caches and register_with_scheduler (or register_in_background). "
           "port=0: the port the scheduler side published in the node's segment.")
      .def("register_kv_caches", &py_worker::register_kv_caches, py::arg("tensors"),
           py::arg("num_blocks"))
      .def("register_cross_layers_kv_cache", &py_worker::register_cross_layers,
           py::arg("tensor"), py::arg("num_blocks"),
           "vLLM's cross-layer KV cache: one contiguous tensor, GPU block b its bytes "
           "[b * page, (b + 1) * page), page = its bytes / num_blocks (blocks outermost).")
      .def("register_with_scheduler", &py_worker::register_with_scheduler)
      .def("register_in_background", &py_worker::register_in_background,
           "register_with_scheduler on a thread of kvconnect's; returns at once. The first "
           "bind_connector_metadata waits for it and raises its error.")
      .def("bind_connector_metadata", &py_worker::bind, py::arg("step") = py::none(),
           py::arg("timeout") = py::none(),
           "Binds `step`'s metadata (None: whichever comes next), waiting up to `timeout` "
           "seconds (None: runtime.step_timeout_ms). Returns the step bound.")
      .def_property_readonly("metadata",
                             [](py_worker& w) -> std::optional<connector_metadata> {
                               const auto* m = w.wc().metadata();
                               if (m == nullptr) return std::nullopt;
                               return *m;
                             })
      .def("handle_preemptions", &py_worker::handle_preemptions)
      .def("start_load_kv", [](py_worker& w) { check(w.wc().start_load_kv()); })
      .def("wait_for_save", [](py_worker& w) { check(w.wc().wait_for_save()); })
      .def("finish_transfers", &py_worker::finish_transfers)
      .def("get_finished", &py_worker::get_finished, py::arg("finished_req_ids"),
           "(finished_sending, finished_recving, job results) of this call.")
      .def("get_block_ids_with_load_errors",
           [](py_worker& w) { return w.wc().get_block_ids_with_load_errors(); })
      .def("clear_connector_metadata", [](py_worker& w) { w.wc().clear_connector_metadata(); })
      .def_property_readonly("rank", [](py_worker& w) { return w.wc().rank(); })
      .def_property_readonly("connected", [](py_worker& w) { return w.wc().connected(); })
      .def_property_readonly("transfers_in_flight",
                             [](py_worker& w) { return w.wc().transfers_in_flight(); })
      .def_property_readonly("jobs_known", [](py_worker& w) { return w.wc().jobs_known(); })
      .def_property_readonly(
          "injected_faults",
          [](py_worker& w) { return fault_counts_dict(w.wc().injected_faults()); })
      .def_property_readonly("tracked_requests",
                             [](py_worker& w) { return w.wc().tracked_requests(); })
      .def("close", &py_worker::close)
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](py_worker& w, py::args) {
        w.close();
        return false;
      });
}

}  // namespace kvc::python
