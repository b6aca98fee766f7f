// completion_stamper: the one place a rank's job result becomes a completion event.
#include "actors/worker/completion_stamper.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvc::worker {
namespace {

TEST(CompletionStamperTest, EveryFieldOfTheRanksResultIsCarriedAndTheSenderNamed) {
  completion_stamper stamper{2, 5};
  const std::vector<rank_job_result> jobs{
      {.job = 7, .kind = transfer_kind::store, .ok = true, .bytes = 4096, .seconds = 0.25},
      {.job = 8,
       .kind = transfer_kind::cascade,
       .ok = false,
       .error = errc::io_error,
       .bytes = 12,
       .seconds = 1.5,
       .detail = "pwrite: No space left on device"}};
  const auto events = stamper.stamp(11, jobs);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0], (completion_event{.rank = 2,
                                         .incarnation = 5,
                                         .seq = 0,
                                         .step = 11,
                                         .job = 7,
                                         .kind = transfer_kind::store,
                                         .ok = true,
                                         .error = errc::ok,
                                         .bytes = 4096,
                                         .seconds = 0.25,
                                         .detail = ""}));
  EXPECT_EQ(events[1], (completion_event{.rank = 2,
                                         .incarnation = 5,
                                         .seq = 1,
                                         .step = 11,
                                         .job = 8,
                                         .kind = transfer_kind::cascade,
                                         .ok = false,
                                         .error = errc::io_error,
                                         .bytes = 12,
                                         .seconds = 1.5,
                                         .detail = "pwrite: No space left on device"}));
}

TEST(CompletionStamperTest, SequenceNumbersContinueAcrossStepsWithoutGaps) {
  completion_stamper stamper{0, 1};
  const std::vector<rank_job_result> one{{.job = 1, .ok = true}};
  EXPECT_EQ(stamper.stamp(1, one).at(0).seq, 0u);
  EXPECT_TRUE(stamper.stamp(2, {}).empty());
  const std::vector<rank_job_result> two{{.job = 2, .ok = true}, {.job = 3, .ok = true}};
  const auto events = stamper.stamp(3, two);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].seq, 1u);
  EXPECT_EQ(events[1].seq, 2u);
  EXPECT_EQ(stamper.next_seq(), 3u);
}

TEST(CompletionStamperTest, ALongDetailIsClippedForTheWire) {
  completion_stamper stamper{1, 0};
  const std::vector<rank_job_result> jobs{
      {.job = 4, .ok = false, .error = errc::device_error, .detail = std::string(400, 'x')}};
  const auto events = stamper.stamp(1, jobs);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].detail, std::string(max_detail_bytes, 'x'));
}

}  // namespace
}  // namespace kvc::worker
