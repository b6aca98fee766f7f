// numa_affinity: the sysfs path of a GPU's PCIe device and the node its file names (pure).
#include "cuda/numa_affinity.hpp"

#include <gtest/gtest.h>

namespace kvc::cuda {
namespace {

TEST(NumaAffinityTest, TheSysfsPathIsLowerCase) {
  EXPECT_EQ(pci_numa_node_path("0000:3B:00.0"), "/sys/bus/pci/devices/0000:3b:00.0/numa_node");
}

TEST(NumaAffinityTest, NodesAreParsedAndNoAffinityIsMinusOne) {
  EXPECT_EQ(*parse_numa_node("1\n"), 1);
  EXPECT_EQ(*parse_numa_node("0"), 0);
  EXPECT_EQ(*parse_numa_node("-1\n"), -1);
  for (const char* bad : {"", "\n", "x", "1x", "-2", "99999999999"}) {
    auto r = parse_numa_node(bad);
    EXPECT_FALSE(r.ok()) << '"' << bad << '"';
    EXPECT_EQ(r.code(), errc::invalid_argument);
  }
}

TEST(NumaAffinityTest, ADeviceWithoutASysfsEntryHasNoNode) {
  auto r = read_pci_numa_node("ffff:ff:1f.7");
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(*r, -1);
}

}  // namespace
}  // namespace kvc::cuda
