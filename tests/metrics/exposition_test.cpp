#include "actors/metrics/exposition.hpp"

#include <limits>

#include <gtest/gtest.h>

namespace kvc::metrics {
namespace {

TEST(ExpositionTest, CounterGetsTotalSuffixHelpAndType) {
  exposition x;
  ASSERT_TRUE(x.add_family("vllm:kv_offload_store_bytes", metric_type::counter, "Bytes stored."));
  ASSERT_TRUE(x.add_value("vllm:kv_offload_store_bytes", {}, 4096));
  EXPECT_EQ(x.render(),
            "# HELP vllm:kv_offload_store_bytes_total Bytes stored.\n"
            "# TYPE vllm:kv_offload_store_bytes_total counter\n"
            "vllm:kv_offload_store_bytes_total 4096\n");
}

TEST(ExpositionTest, CounterAlreadyEndingInTotalKeepsItsName) {
  exposition x;
  ASSERT_TRUE(x.add_family("a_total", metric_type::counter, "h"));
  ASSERT_TRUE(x.add_value("a_total", {}, 1));
  EXPECT_EQ(x.render(), "# HELP a_total h\n# TYPE a_total counter\na_total 1\n");
}

TEST(ExpositionTest, GaugeWithLabelsAndFractions) {
  exposition x;
  ASSERT_TRUE(x.add_family("g", metric_type::gauge, "A gauge."));
  ASSERT_TRUE(x.add_value("g", {{"kind", "load"}, {"node", "n0"}}, 0.25));
  ASSERT_TRUE(x.add_value("g", {{"kind", "store"}, {"node", "n0"}}, -3));
  EXPECT_EQ(x.render(),
            "# HELP g A gauge.\n# TYPE g gauge\n"
            "g{kind=\"load\",node=\"n0\"} 0.25\n"
            "g{kind=\"store\",node=\"n0\"} -3\n");
}

TEST(ExpositionTest, LabelValuesAndHelpAreEscaped) {
  exposition x;
  ASSERT_TRUE(x.add_family("g", metric_type::gauge, "back\\slash\nnew line \"quotes\" stay"));
  ASSERT_TRUE(x.add_value("g", {{"v", "a\"b\\c\nd"}}, 1));
  EXPECT_EQ(x.render(),
            "# HELP g back\\\\slash\\nnew line \"quotes\" stay\n# TYPE g gauge\n"
            "g{v=\"a\\\"b\\\\c\\nd\"} 1\n");
}

TEST(ExpositionTest, HistogramBucketsAreCumulativeWithInfSumCount) {
  auto h = histogram::create({1, 2.5, 10});
  ASSERT_TRUE(h.ok());
  for (double v : {0.5, 1.0, 2.0, 3.0, 100.0}) h->observe(v);
  exposition x;
  ASSERT_TRUE(x.add_family("lat", metric_type::histogram, "Latency."));
  ASSERT_TRUE(x.add_histogram("lat", {{"kind", "load"}}, *h));
  EXPECT_EQ(x.render(),
            "# HELP lat Latency.\n# TYPE lat histogram\n"
            "lat_bucket{kind=\"load\",le=\"1\"} 2\n"
            "lat_bucket{kind=\"load\",le=\"2.5\"} 3\n"
            "lat_bucket{kind=\"load\",le=\"10\"} 4\n"
            "lat_bucket{kind=\"load\",le=\"+Inf\"} 5\n"
            "lat_sum{kind=\"load\"} 106.5\n"
            "lat_count{kind=\"load\"} 5\n");
}

TEST(ExpositionTest, HistogramWithoutLabelsHasOnlyLe) {
  auto h = histogram::create({1e6});
  ASSERT_TRUE(h.ok());
  h->observe(2e6);
  exposition x;
  ASSERT_TRUE(x.add_family("s", metric_type::histogram, "S."));
  ASSERT_TRUE(x.add_histogram("s", {}, *h));
  EXPECT_EQ(x.render(),
            "# HELP s S.\n# TYPE s histogram\n"
            "s_bucket{le=\"1000000\"} 0\ns_bucket{le=\"+Inf\"} 1\ns_sum 2000000\ns_count 1\n");
}

TEST(ExpositionTest, SpecialValues) {
  EXPECT_EQ(exposition::format_value(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(exposition::format_value(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(exposition::format_value(std::numeric_limits<double>::quiet_NaN()), "NaN");
  EXPECT_EQ(exposition::format_value(18446744073709551615.0), "18446744073709551616");
  EXPECT_EQ(exposition::format_value(1e15), "1e+15");
  EXPECT_EQ(exposition::format_value(3e6), "3000000");
  EXPECT_EQ(exposition::format_value(-0.0), "0");
  EXPECT_EQ(exposition::format_value(0.1), "0.1");
}

TEST(ExpositionTest, BadNamesAreRefusedAndNothingIsAdded) {
  exposition x;
  EXPECT_EQ(x.add_family("1abc", metric_type::gauge, "h").code(), errc::invalid_argument);
  EXPECT_EQ(x.add_family("a-b", metric_type::gauge, "h").code(), errc::invalid_argument);
  EXPECT_EQ(x.add_family("", metric_type::gauge, "h").code(), errc::invalid_argument);
  ASSERT_TRUE(x.add_family("ok", metric_type::histogram, "h"));
  EXPECT_EQ(x.add_family("ok", metric_type::gauge, "h").code(), errc::invalid_argument);
  histogram h;
  EXPECT_EQ(x.add_histogram("ok", {{"le", "1"}}, h).code(), errc::invalid_argument);
  EXPECT_EQ(x.add_histogram("ok", {{"__x", "1"}}, h).code(), errc::invalid_argument);
  EXPECT_EQ(x.add_histogram("ok", {{"a:b", "1"}}, h).code(), errc::invalid_argument);
  EXPECT_EQ(x.add_histogram("ok", {{"a", "1"}, {"a", "2"}}, h).code(), errc::invalid_argument);
  EXPECT_EQ(x.add_value("ok", {}, 1).code(), errc::invalid_argument);  // not a histogram sample
  EXPECT_EQ(x.add_value("missing", {}, 1).code(), errc::not_found);
  EXPECT_EQ(x.render(), "# HELP ok h\n# TYPE ok histogram\n");
}

TEST(ExpositionTest, CounterNamesCollidingAfterTheSuffixAreRefused) {
  exposition x;
  ASSERT_TRUE(x.add_family("a", metric_type::counter, "h"));
  EXPECT_EQ(x.add_family("a_total", metric_type::counter, "h").code(), errc::invalid_argument);
}

TEST(HistogramTest, BoundsMustIncrease) {
  EXPECT_FALSE(histogram::create({1, 1}).ok());
  EXPECT_FALSE(histogram::create({2, 1}).ok());
  EXPECT_FALSE(histogram::create({std::numeric_limits<double>::infinity()}).ok());
  EXPECT_TRUE(histogram::create({}).ok());
}

TEST(HistogramTest, ValueOnABoundCountsInThatBucket) {
  auto h = histogram::create({1, 2});
  ASSERT_TRUE(h.ok());
  h->observe(2);
  h->observe(2.0000001);
  EXPECT_EQ(h->counts()[0], 0u);
  EXPECT_EQ(h->counts()[1], 1u);
  EXPECT_EQ(h->counts()[2], 1u);
  EXPECT_EQ(h->count(), 2u);
}

}  // namespace
}  // namespace kvc::metrics
