#pragma once
/// numa_affinity: which NUMA node a PCIe device (a GPU) hangs off, from sysfs. The worker binds
/// its pool region's pages to that node before faulting them in, so that copies to and from the
/// GPU cross no inter-socket link. Pure string handling plus one file read; no CUDA.
#include <string>
#include <string_view>

#include "proto/status.hpp"

namespace kvc::cuda {

/// "/sys/bus/pci/devices/0000:3b:00.0/numa_node" for the bus id CUDA gives
/// (cudaDeviceGetPCIBusId: "0000:3B:00.0", upper-case hex); sysfs names are lower-case.
std::string pci_numa_node_path(std::string_view bus_id);

/// The node in a numa_node file's text ("1\n"); -1 for "-1" (no affinity); an error for text
/// that is not an integer >= -1.
result<int> parse_numa_node(std::string_view text);

/// The node of the device at `bus_id` read from sysfs; -1 when the file is missing or says -1.
result<int> read_pci_numa_node(std::string_view bus_id);

}  // namespace kvc::cuda
