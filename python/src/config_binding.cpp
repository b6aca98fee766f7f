// kvconnect.Config: the launch config (docs/config.md) read from a Python dict by the same loader
// as a YAML file (launch::load_config): the dict becomes YAML text, so the keys, defaults,
// checks and "did you mean" are the file's. An engine's own facts (its topology, its KV cache)
// go in as overrides, the loader's --set: they win over the dict.
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <yaml-cpp/yaml.h>

#include "launch/config/config_loader.hpp"
#include "launch/config/fault_options.hpp"
#include "launch/config/launch_config.hpp"
#include "python/src/bindings.hpp"
#include "python/src/errors.hpp"

namespace kvc::python {
namespace py = pybind11;

namespace {

std::string type_name(py::handle v) {
  return py::str(py::type::handle_of(v).attr("__name__"));
}

std::string joined(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

/// A Python value as a YAML node: dicts with str keys, lists and tuples, str, int, float, bool,
/// None. Anything else is a TypeError naming the key.
YAML::Node to_node(py::handle v, const std::string& path) {
  if (v.is_none()) return YAML::Node(YAML::NodeType::Null);
  if (PyBool_Check(v.ptr())) return YAML::Node(v.ptr() == Py_True ? "true" : "false");
  if (PyLong_Check(v.ptr()) || PyFloat_Check(v.ptr())) return YAML::Node(std::string(py::str(v)));
  if (PyUnicode_Check(v.ptr())) return YAML::Node(v.cast<std::string>());
  if (PyDict_Check(v.ptr())) {
    YAML::Node map(YAML::NodeType::Map);
    for (auto [k, x] : v.cast<py::dict>()) {
      if (!PyUnicode_Check(k.ptr())) {
        type_error("config key " + std::string(py::repr(k)) + (path.empty() ? "" : " in " + path) +
                   ": keys must be str, got " + type_name(k));
      }
      const auto key = k.cast<std::string>();
      map[key] = to_node(x, joined(path, key));
    }
    return map;
  }
  if (PyList_Check(v.ptr()) || PyTuple_Check(v.ptr())) {
    YAML::Node seq(YAML::NodeType::Sequence);
    size_t i = 0;
    for (auto x : v) {
      seq.push_back(to_node(x, path + "[" + std::to_string(i++) + "]"));
    }
    return seq;
  }
  type_error("config key " + (path.empty() ? std::string("(top level)") : path) +
             ": a value must be a dict, list, str, int, float, bool or None, got " + type_name(v));
}

std::string flow(const YAML::Node& n) {
  YAML::Emitter out;
  out << YAML::Flow << n;
  return out.c_str();
}

/// "key.path=value" for every leaf of `n` (lists are leaves: they replace the list).
void flatten(const YAML::Node& n, const std::string& path, std::vector<std::string>& out) {
  if (n.IsMap() && n.size() > 0) {
    for (const auto& kv : n) flatten(kv.second, joined(path, kv.first.Scalar()), out);
    return;
  }
  out.push_back(path + "=" + flow(n));
}

YAML::Node top_map(py::handle v, const char* what) {
  if (v.is_none()) return YAML::Node(YAML::NodeType::Map);
  if (!PyDict_Check(v.ptr())) {
    type_error(std::string(what) + " must be a dict, got " + type_name(v));
  }
  return to_node(v, "");
}

config_handle load(const std::string& text, const std::string& name, py::handle engine) {
  std::vector<std::string> overrides;
  const YAML::Node e = top_map(engine, "engine");
  if (e.size() > 0) flatten(e, "", overrides);
  auto loaded = launch::load_config(text, name, overrides, launch::config_use::engine);
  if (!loaded.ok()) {
    std::vector<std::pair<std::string, std::string>> problems;
    for (const auto& err : loaded.errors) problems.emplace_back(err.key_path, err.message);
    raise_config(std::move(problems));
  }
  return {std::move(loaded.config)};
}

config_handle from_dict(py::handle config, py::handle engine, const py::kwargs& sections) {
  YAML::Node root = top_map(config, "config");
  for (auto [k, v] : sections) {
    const auto key = k.cast<std::string>();
    root[key] = to_node(v, key);
  }
  std::string text;
  if (root.size() > 0) {
    YAML::Emitter out;
    out << root;
    text = out.c_str();
  }
  return load(text, "config", engine);
}

}  // namespace

void bind_config(py::module_& m) {
  m.def(
      "config_sections",
      [] {
        std::vector<std::string> out;
        for (auto s : launch::config_sections()) out.emplace_back(s);
        return out;
      },
      "The config's sections, in file order (docs/config.md).");

  py::class_<config_handle>(m, "Config",
                            "A kvconnect config (docs/config.md), read and checked by the same "
                            "loader as a YAML file.")
      .def(py::init(&from_dict), py::arg("config") = py::none(), py::kw_only(),
           py::arg("engine") = py::none(),
           "Config(config: dict | None = None, *, engine: dict | None = None, **sections). "
           "`config` and the keyword sections (topology=..., offload=...) are the YAML file's "
           "keys; `engine` holds the embedding engine's own facts, which override them. "
           "ConfigError (a ValueError) names every key refused; TypeError for a value no YAML "
           "config can hold.")
      .def_static(
          "from_yaml",
          [](const std::string& text, const std::string& name, py::handle engine) {
            return load(text, name, engine);
          },
          py::arg("text"), py::kw_only(), py::arg("name") = "config",
          py::arg("engine") = py::none(), "The config from YAML text (a config file's content).")
      .def(
          "to_yaml", [](const config_handle& c) { return launch::to_yaml(c.config); },
          "Every key with its value, as `kvconnect config show` prints it.")
      .def_property_readonly("world_size",
                             [](const config_handle& c) {
                               return c.config.topology.tensor_parallel *
                                      c.config.topology.pipeline_parallel;
                             })
      .def("__eq__",
           [](const config_handle& a, const config_handle& b) { return a.config == b.config; })
      .def("__repr__", [](const config_handle& c) {
        return "<kvconnect.Config tp=" + std::to_string(c.config.topology.tensor_parallel) +
               " pp=" + std::to_string(c.config.topology.pipeline_parallel) +
               " cpu_bytes_to_use=" + std::to_string(c.config.offload.cpu_bytes_to_use) + ">";
      });
}

fault_config faults_at_site(const config_handle& cfg, fault_site site) {
  const launch::runtime_section& rt = cfg.config.runtime;
  auto all = launch::parse_fault_options(rt.faults, rt.fault_seed);
  if (!all) raise_config({{"runtime.faults", all.error().message()}});
  for (size_t i = 0; i < all->specs.size(); ++i) {
    if (site_of(all->specs[i].kind) == fault_site::process) {
      raise_config({{"runtime.faults[" + std::to_string(i) + "]",
                     std::string{to_string(all->specs[i].kind)} +
                         " is a process fault: only `kvconnect launch` injects it"}});
    }
  }
  return faults_at(*all, site);
}

}  // namespace kvc::python
