#pragma once
/// device_switch: what the cuda backend does around each public call so that its device is
/// current for the call and the caller's thread ends as it was, without ever creating a context
/// the caller did not have.
///
/// Why: cudaGetDevice answers 0 on a thread with no current context, and cudaSetDevice makes the
/// device's primary context current, initialising it (CUDA >= 12). "Restoring device 0" on a
/// fresh worker thread would therefore create a primary context on GPU 0 in every worker of a
/// node (hundreds of MB each, and cudaErrorDevicesUnavailable for rank 0's own engine under
/// Exclusive_Process). So the decision is taken on the current *context*:
///   - the caller's context is on the engine's device: nothing to do;
///   - the caller has a context on another device: make the engine's device current, and put the
///     caller's exact context back afterwards (cuCtxSetCurrent: a non-primary context stays
///     itself, and no primary context of the caller's device is created);
///   - the caller has no context: make the engine's device current and leave it so (there is
///     nothing to restore, and "restoring" through cudaSetDevice would create GPU 0's context).
/// Pure: the cuda backend feeds it what the driver says.
namespace kvc::cuda {

struct device_switch {
  bool set_device = false;       ///< cudaSetDevice(engine device) before the call
  bool restore_context = false;  ///< cuCtxSetCurrent(caller's context) after it
};

/// `current_device` is read only when `had_context` (cudaGetDevice of the current context).
constexpr device_switch plan_device_switch(bool had_context, int current_device,
                                           int engine_device) noexcept {
  if (!had_context) return {.set_device = true, .restore_context = false};
  if (current_device == engine_device) return {};
  return {.set_device = true, .restore_context = true};
}

}  // namespace kvc::cuda
