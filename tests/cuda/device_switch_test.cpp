// device_switch: the cuda backend's per-call device decision never makes it restore a device
// through cudaSetDevice, so no context is ever created on a device the caller did not use
// (GPU 0 in every worker, before). Pure; every run.
#include "cuda/device_switch.hpp"

#include <gtest/gtest.h>

namespace kvc::cuda {
namespace {

TEST(DeviceSwitchTest, AThreadWithoutAContextGetsTheEngineDeviceAndNothingIsRestored) {
  // cudaGetDevice would answer 0 here; "restoring" 0 would create GPU 0's primary context.
  for (int engine_device : {0, 1, 7}) {
    const device_switch d = plan_device_switch(false, 0, engine_device);
    EXPECT_TRUE(d.set_device) << engine_device;
    EXPECT_FALSE(d.restore_context) << engine_device;
  }
}

TEST(DeviceSwitchTest, TheCallersContextOnTheEngineDeviceIsLeftAlone) {
  const device_switch d = plan_device_switch(true, 3, 3);
  EXPECT_FALSE(d.set_device);
  EXPECT_FALSE(d.restore_context);
}

TEST(DeviceSwitchTest, TheCallersContextOnAnotherDeviceIsPutBack) {
  const device_switch d = plan_device_switch(true, 0, 2);
  EXPECT_TRUE(d.set_device);
  EXPECT_TRUE(d.restore_context);
}

}  // namespace
}  // namespace kvc::cuda
