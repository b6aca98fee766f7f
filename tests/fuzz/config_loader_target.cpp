// Fuzz target: the launch config loader (launch/config/config_loader.hpp). The bytes before the
// first NUL are the YAML file, each line after it one --set item. The loader must answer with a
// config or errors, never throw; every error names its place and says what is wrong.
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "launch/config/config_loader.hpp"
#include "tests/fuzz/fuzz_targets.hpp"

namespace kvc::fuzz {

int config_loader(const uint8_t* data, size_t size) {
  const std::string_view all{reinterpret_cast<const char*>(data), size};
  const size_t nul = all.find('\0');
  const std::string_view yaml = all.substr(0, nul);
  std::vector<std::string> overrides;
  if (nul != std::string_view::npos) {
    std::string_view rest = all.substr(nul + 1);
    while (!rest.empty()) {
      const size_t nl = rest.find('\n');
      overrides.emplace_back(rest.substr(0, nl));
      rest = nl == std::string_view::npos ? std::string_view{} : rest.substr(nl + 1);
    }
  }
  const launch::loaded_config loaded = launch::load_config(yaml, "fuzz.yaml", overrides);
  for (const auto& e : loaded.errors) {
    KVC_FUZZ_CHECK(!e.location.empty());
    KVC_FUZZ_CHECK(!e.message.empty());
  }
  return 0;
}

}  // namespace kvc::fuzz
