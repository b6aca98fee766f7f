#pragma once
/// launcher_output: the two outputs of `kvconnect launch` itself: its JSON lines on stdout (what
/// a script reads) and its sentences on stderr ("kvconnect launch: ...", what a person reads).
/// Each is one write, flushed.
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

namespace kvc::launch {

/// One JSON line of the launcher's on stdout.
inline void emit(const nlohmann::json& line) {
  std::cout << line.dump() << std::endl;
}

/// One sentence of the launcher's on stderr.
inline void say(const std::string& message) {
  std::cerr << ("kvconnect launch: " + message + "\n") << std::flush;
}

}  // namespace kvc::launch
