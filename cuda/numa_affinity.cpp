#include "cuda/numa_affinity.hpp"

#include <cctype>
#include <charconv>
#include <fstream>
#include <sstream>

namespace kvc::cuda {

std::string pci_numa_node_path(std::string_view bus_id) {
  std::string id(bus_id);
  for (char& c : id) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return "/sys/bus/pci/devices/" + id + "/numa_node";
}

result<int> parse_numa_node(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  int node = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), node);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size() || node < -1) {
    return make_error(errc::invalid_argument,
                      "numa_node: \"" + std::string(text) + "\" is not a NUMA node");
  }
  return node;
}

result<int> read_pci_numa_node(std::string_view bus_id) {
  std::ifstream in(pci_numa_node_path(bus_id));
  if (!in) return -1;  // no sysfs entry (a container without /sys, a virtual device)
  std::stringstream text;
  text << in.rdbuf();
  return parse_numa_node(text.str());
}

}  // namespace kvc::cuda
