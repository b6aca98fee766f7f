#pragma once
/// device_health: whether the device can still take work. The CUDA headers list errors that
/// "leave the process in an inconsistent state": once one is seen, every later CUDA call returns
/// it again and only a restart helps. Such a sticky error latches here; from then on admit()
/// refuses every submit with errc::device_unavailable naming the error, and call() returns the
/// latched code without running the CUDA call at all, so a dead device costs no driver calls and
/// every report says what killed it.
///
/// Pure: codes are plain ints (cudaError_t values). The sticky codes and their names are listed
/// below from driver_types.h; cuda_copy_engine.cu checks each against the enum with
/// static_assert, so this class needs no CUDA header and is tested without a GPU.
///
/// Every failed call is remembered in words (last_failure(): the call and the error's name, e.g.
/// "cudaEventQuery returned cudaErrorIllegalAddress (700)") for transfer reports. Names come from
/// an error_namer (the CUDA backend passes cudaGetErrorName); without one, sticky codes are named
/// from the table below and others as "CUDA error N".
///
/// Test hook: a failure_hook, when set, is asked for every call() and may replace the call's
/// result with a simulated code (the real call is then not made). Not thread-safe: one owner.
#include <array>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

#include "proto/status.hpp"

namespace kvc::cuda {

/// driver_types.h (CUDA 13.0): the errors documented as leaving the process in an inconsistent
/// state ("any further CUDA work will return the same error"), uncorrectable ECC / NVLink
/// errors, and what a GPU that fell off the bus or was taken away answers once the engine runs
/// (cudaErrorDevicesUnavailable, cudaErrorUnknown): no later call can succeed on that context
/// either. (Before an engine exists, the same two codes mean "no usable device".)
inline constexpr std::array<std::pair<int, std::string_view>, 17> sticky_cuda_errors{{
    {46, "cudaErrorDevicesUnavailable"},
    {214, "cudaErrorECCUncorrectable"},
    {220, "cudaErrorNvlinkUncorrectable"},
    {226, "cudaErrorContained"},
    {700, "cudaErrorIllegalAddress"},
    {702, "cudaErrorLaunchTimeout"},
    {710, "cudaErrorAssert"},
    {714, "cudaErrorHardwareStackError"},
    {715, "cudaErrorIllegalInstruction"},
    {716, "cudaErrorMisalignedAddress"},
    {717, "cudaErrorInvalidAddressSpace"},
    {718, "cudaErrorInvalidPc"},
    {719, "cudaErrorLaunchFailure"},
    {721, "cudaErrorTensorMemoryLeak"},
    {810, "cudaErrorMpsClientTerminated"},
    {911, "cudaErrorExternalDevice"},
    {999, "cudaErrorUnknown"},
}};

class device_health {
 public:
  /// Returns the code to simulate for the named call, or 0 to make the real call.
  using failure_hook = std::function<int(std::string_view call)>;

  /// The name of a cudaError_t value ("cudaErrorInvalidValue").
  using error_namer = std::function<std::string(int code)>;

  void set_failure_hook(failure_hook hook) { hook_ = std::move(hook); }
  void set_error_namer(error_namer namer) { namer_ = std::move(namer); }

  /// Runs `fn` (a CUDA call returning a cudaError_t) unless the device is latched or the hook
  /// simulates a failure; observes the result and returns it as an int. When latched, returns
  /// the latched code without running `fn`.
  template <class Fn>
  int call(std::string_view name, Fn&& fn) {
    if (latched()) return latched_code_;
    if (hook_) {
      if (const int simulated = hook_(name); simulated != 0) return observe(name, simulated);
    }
    return observe(name, static_cast<int>(fn()));
  }

  /// Records the result of a call made outside call(); latches a sticky code and remembers a
  /// failure (any code but cudaSuccess and cudaErrorNotReady) in words. Returns `code`.
  int observe(std::string_view name, int code);

  /// "<call> returned <error name> (<code>)".
  std::string failure_text(std::string_view call, int code) const;
  /// failure_text of the latest failed call; "" before any.
  const std::string& last_failure() const noexcept { return last_failure_; }

  /// ok while healthy; errc::device_unavailable naming the latched error and the call that saw it.
  status admit() const;

  bool latched() const noexcept { return latched_code_ != 0; }
  int latched_code() const noexcept { return latched_code_; }

  /// "cudaErrorIllegalAddress" etc. for a sticky code; "" for any other.
  static constexpr std::string_view sticky_name(int code) noexcept {
    for (const auto& [c, name] : sticky_cuda_errors) {
      if (c == code) return name;
    }
    return {};
  }
  /// True for the codes that leave the CUDA context unusable.
  static constexpr bool is_sticky(int code) noexcept { return !sticky_name(code).empty(); }

 private:
  failure_hook hook_;
  error_namer namer_;
  std::string last_failure_;
  int latched_code_ = 0;
  std::string latched_by_;  ///< the call that returned the latched code
};

}  // namespace kvc::cuda
