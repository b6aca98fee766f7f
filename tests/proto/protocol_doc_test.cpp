// docs/protocol.md names the protocol version the code speaks (proto/registration.hpp): every
// place the document states it must agree with kvc::protocol_version.
#include "proto/registration.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <string>

namespace {

std::string read_doc(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(ProtocolDocTest, EveryStatedVersionIsTheCodes) {
  const std::string doc = read_doc(std::string(KVC_SOURCE_DIR) + "/docs/protocol.md");
  // "Protocol version N" in the introduction, "`kvc::protocol_version` (N)" in the handshake's
  // table.
  const std::regex stated{R"((?:Protocol version |`kvc::protocol_version` \()(\d+))"};
  int found = 0;
  for (auto it = std::sregex_iterator(doc.begin(), doc.end(), stated); it != std::sregex_iterator();
       ++it) {
    ++found;
    EXPECT_EQ(std::stoul((*it)[1].str()), kvc::protocol_version) << (*it)[0].str();
  }
  EXPECT_EQ(found, 2);
}

}  // namespace
