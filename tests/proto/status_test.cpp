#include "proto/status.hpp"

#include <gtest/gtest.h>

namespace kvc {
namespace {

TEST(StatusTest, DefaultIsOk) {
  status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), errc::ok);
  EXPECT_EQ(s.to_string(), "ok");
}

TEST(StatusTest, ErrorCarriesCodeAndMessage) {
  status s = make_error(errc::not_found, "key 7 is not stored");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), errc::not_found);
  EXPECT_EQ(s.to_string(), "not_found: key 7 is not stored");
}

TEST(ResultTest, HoldsValueOrError) {
  result<int> good = 42;
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 42);
  result<int> bad = make_error(errc::invalid_argument, "negative");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.code(), errc::invalid_argument);
  EXPECT_EQ(bad.error().message(), "negative");
}

TEST(ErrcTest, NamesAreStable) {
  EXPECT_EQ(to_string(errc::device_unavailable), "device_unavailable");
  EXPECT_EQ(static_cast<int>(errc::device_unavailable), 7);
  EXPECT_EQ(to_string(errc::internal), "internal");
}

}  // namespace
}  // namespace kvc
