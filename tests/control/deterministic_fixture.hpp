#pragma once
/// deterministic_actor_test: a GoogleTest fixture that runs a CAF actor system on CAF's
/// deterministic test scheduler (scheduler.policy = testing) with a fake clock, so actor tests
/// need no threads and no sleeps. Modelled on caf::test::test_coordinator_fixture (CAF's own
/// unit-test DSL, which needs CAF's test macros and so cannot be used with GoogleTest).
///
/// Messages are delivered only when the test calls run() / run_once(); delayed messages and
/// request timeouts fire only when it calls advance(). Spawn through spawn()/track() so the
/// fixture shuts the actors down before the system (~actor_system waits for every actor).
/// Every kvconnect message type is registered, as in a real process. Single-threaded.
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/error.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/system_messages.hpp>
#include <caf/exit_reason.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/send.hpp>

#include "actors/control/system_config.hpp"

namespace kvc::test_support {

class deterministic_actor_test : public ::testing::Test {
 protected:
  deterministic_actor_test()
      : sys_(init(cfg_)), sched(dynamic_cast<caf::scheduler::test_coordinator&>(sys_.scheduler())) {
    // Like CAF's fixture: the fake clock does not start at 0.
    sched.clock().current_time += std::chrono::hours(1);
  }

  ~deterministic_actor_test() override {
    for (auto& a : tracked_) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    sched.run();
  }

  caf::actor_system& sys() { return sys_; }

  /// Spawns, remembers the actor for shutdown, and lets it initialise.
  template <class... Ts>
  auto spawn(Ts&&... xs) {
    auto handle = sys_.spawn(std::forward<Ts>(xs)...);
    track(handle);
    return handle;
  }

  /// Remembers an actor spawned elsewhere (e.g. by a spawn_* factory) for shutdown.
  template <class Handle>
  void track(const Handle& h) {
    tracked_.push_back(caf::actor_cast<caf::actor>(h));
    sched.run();
  }

  /// Delivers every pending message (no timers). Returns how many were handled.
  size_t run() { return sched.run(); }
  /// Delivers one message; false if none was pending.
  bool run_once() { return sched.try_run_once(); }
  /// The reason `h` ended with, once it ended (a monitoring actor records its down_msg).
  template <class Handle>
  std::shared_ptr<std::optional<caf::error>> watch(const Handle& h) {
    auto reason = std::make_shared<std::optional<caf::error>>();
    spawn([reason, h](caf::event_based_actor* self) -> caf::behavior {
      self->monitor(h);
      self->set_down_handler([reason, self](caf::down_msg& dm) {
        *reason = dm.reason;
        self->quit();
      });
      return {[](int) {}};
    });
    return reason;
  }

  /// Moves the fake clock forward, fires the timers due by then, delivers what they sent.
  /// Returns the number of timers fired.
  size_t advance(caf::timespan d) {
    size_t fired = sched.clock().advance_time(d);
    sched.run();
    return fired;
  }

 private:
  static caf::actor_system_config& init(caf::actor_system_config& cfg) {
    control::add_message_types(cfg);
    cfg.set("scheduler.policy", caf::atom("testing"));
    cfg.set("logger.file-verbosity", caf::atom("quiet"));
    cfg.set("logger.console", caf::atom("none"));
    return cfg;
  }

  caf::actor_system_config cfg_;  // must outlive and precede sys_
  caf::actor_system sys_;

 protected:
  caf::scheduler::test_coordinator& sched;

 private:
  std::vector<caf::actor> tracked_;
};

}  // namespace kvc::test_support
