#include "launch/config_file.hpp"

#include <fstream>
#include <iostream>
#include <sstream>

namespace kvc::launch {

loaded_config load_config_file(const std::string& path, std::span<const std::string> overrides) {
  if (path.empty()) return load_config("", "<default>", overrides);
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  if (in) text << in.rdbuf();
  if (!in || in.bad()) {
    loaded_config out;
    out.errors.push_back({path, 0, "", "cannot read the file"});
    return out;
  }
  return load_config(text.str(), path, overrides);
}

void print_config_errors(const loaded_config& loaded, const std::string& who) {
  for (const auto& e : loaded.errors) {
    std::cerr << "kvconnect " << who << ": " << e.to_string() << "\n";
  }
  std::cerr << "kvconnect " << who << ": " << loaded.errors.size()
            << (loaded.errors.size() == 1 ? " error" : " errors") << " in the config\n";
}

}  // namespace kvc::launch
