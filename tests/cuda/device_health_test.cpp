// device_health: sticky CUDA errors latch, later calls are refused without running, reports name
// the error; failures are simulated through the failure hook.
#include "cuda/device_health.hpp"

#include <gtest/gtest.h>

#include <string>
#include <string_view>

namespace kvc::cuda {
namespace {

constexpr int k_success = 0;
constexpr int k_invalid_value = 1;      // cudaErrorInvalidValue: not sticky
constexpr int k_illegal_address = 700;  // cudaErrorIllegalAddress
constexpr int k_launch_failure = 719;   // cudaErrorLaunchFailure

TEST(DeviceHealthTest, StickyCodesAreKnownByNumber) {
  EXPECT_TRUE(device_health::is_sticky(k_illegal_address));
  EXPECT_TRUE(device_health::is_sticky(k_launch_failure));
  EXPECT_TRUE(device_health::is_sticky(214));  // cudaErrorECCUncorrectable
  // A GPU lost from the bus or taken away answers these; no later call on the context succeeds.
  EXPECT_TRUE(device_health::is_sticky(46));   // cudaErrorDevicesUnavailable
  EXPECT_TRUE(device_health::is_sticky(999));  // cudaErrorUnknown
  EXPECT_EQ(device_health::sticky_name(999), "cudaErrorUnknown");
  EXPECT_FALSE(device_health::is_sticky(k_success));
  EXPECT_FALSE(device_health::is_sticky(k_invalid_value));
  EXPECT_FALSE(device_health::is_sticky(600));  // cudaErrorNotReady
  EXPECT_EQ(device_health::sticky_name(k_illegal_address), "cudaErrorIllegalAddress");
  EXPECT_EQ(device_health::sticky_name(2), "");
}

TEST(DeviceHealthTest, OrdinaryErrorsDoNotLatch) {
  device_health h;
  int runs = 0;
  EXPECT_EQ(h.call("cudaMemcpyAsync",
                   [&] {
                     ++runs;
                     return k_invalid_value;
                   }),
            k_invalid_value);
  EXPECT_FALSE(h.latched());
  EXPECT_TRUE(h.admit().ok());
  EXPECT_EQ(h.call("cudaMemcpyAsync",
                   [&] {
                     ++runs;
                     return k_success;
                   }),
            k_success);
  EXPECT_EQ(runs, 2);
}

TEST(DeviceHealthTest, StickyErrorLatchesAndLaterCallsDoNotRun) {
  device_health h;
  std::string fail_call;  // the hook simulates an illegal address on this call
  int hooked = 0;
  h.set_failure_hook([&](std::string_view call) {
    ++hooked;
    return call == fail_call ? k_illegal_address : 0;
  });
  int runs = 0;
  auto real = [&] {
    ++runs;
    return k_success;
  };
  EXPECT_EQ(h.call("cudaMemcpyAsync", real), k_success);
  EXPECT_EQ(runs, 1) << "the hook returned 0: the real call must run";
  fail_call = "cudaEventQuery";
  EXPECT_EQ(h.call("cudaEventQuery", real), k_illegal_address);
  EXPECT_EQ(runs, 1) << "a simulated failure replaces the real call";
  ASSERT_TRUE(h.latched());
  EXPECT_EQ(h.latched_code(), k_illegal_address);
  fail_call.clear();
  const int hooked_before = hooked;
  for (int k = 0; k < 3; ++k) EXPECT_EQ(h.call("cudaMemcpyAsync", real), k_illegal_address);
  EXPECT_EQ(runs, 1) << "a latched device made a CUDA call";
  EXPECT_EQ(hooked, hooked_before) << "a latched device consulted the hook";
  const status s = h.admit();
  EXPECT_EQ(s.code(), errc::device_unavailable);
  EXPECT_NE(s.message().find("cudaErrorIllegalAddress"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("cudaEventQuery"), std::string::npos) << s.message();
}

TEST(DeviceHealthTest, FirstStickyErrorIsTheOneReported) {
  device_health h;
  EXPECT_EQ(h.observe("cudaStreamSynchronize", k_launch_failure), k_launch_failure);
  EXPECT_EQ(h.observe("cudaEventQuery", k_illegal_address), k_illegal_address);
  EXPECT_EQ(h.observe("cudaEventQuery", k_success), k_success);
  EXPECT_EQ(h.latched_code(), k_launch_failure) << "latching is sticky and keeps the first";
  EXPECT_NE(h.admit().message().find("cudaErrorLaunchFailure"), std::string::npos);
}

TEST(DeviceHealthTest, InjectedFailureIsNamedInLastFailure) {
  device_health h;
  EXPECT_EQ(h.last_failure(), "");
  h.set_failure_hook([](std::string_view call) { return call == "cudaEventQuery" ? 700 : 0; });
  int runs = 0;
  EXPECT_EQ(h.call("cudaEventQuery",
                   [&] {
                     ++runs;
                     return k_success;
                   }),
            k_illegal_address);
  EXPECT_EQ(runs, 0) << "the simulated failure replaces the call";
  EXPECT_EQ(h.last_failure(), "cudaEventQuery returned cudaErrorIllegalAddress (700)");
  EXPECT_NE(h.admit().message().find("cudaErrorIllegalAddress"), std::string::npos);
}

TEST(DeviceHealthTest, FailureTextUsesTheNamerAndSkipsNotReady) {
  device_health h;
  EXPECT_EQ(h.failure_text("cudaMemcpyAsync", k_invalid_value),
            "cudaMemcpyAsync returned CUDA error 1 (1)")
      << "without a namer only sticky codes have names";
  h.set_error_namer([](int code) {
    return code == k_invalid_value ? std::string("cudaErrorInvalidValue") : std::string();
  });
  EXPECT_EQ(h.observe("cudaMemcpyAsync", k_invalid_value), k_invalid_value);
  EXPECT_EQ(h.last_failure(), "cudaMemcpyAsync returned cudaErrorInvalidValue (1)");
  (void)h.observe("cudaEventQuery", 600);  // cudaErrorNotReady: pending, not a failure
  (void)h.observe("cudaEventQuery", k_success);
  EXPECT_EQ(h.last_failure(), "cudaMemcpyAsync returned cudaErrorInvalidValue (1)");
  EXPECT_EQ(h.failure_text("x", 2), "x returned CUDA error 2 (2)") << "an empty name is numbered";
  EXPECT_FALSE(h.latched());
}

}  // namespace
}  // namespace kvc::cuda
