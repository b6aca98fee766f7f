// The failure detail's helpers: clipping on a UTF-8 boundary, the outcome text and log line;
// a rank's job result and the coordinator's are distinct types.
#include "proto/completion.hpp"

#include <gtest/gtest.h>

#include <type_traits>

namespace kvc {
namespace {

TEST(CompletionDetail, ShortTextIsKeptWhole) {
  EXPECT_EQ(clip_detail(""), "");
  const std::string exact(max_detail_bytes, 'a');
  EXPECT_EQ(clip_detail(exact), exact);
}

TEST(CompletionDetail, LongTextIsCutToTheLimit) {
  const std::string text(max_detail_bytes + 40, 'a');
  EXPECT_EQ(clip_detail(text), std::string(max_detail_bytes, 'a'));
}

TEST(CompletionDetail, ACutNeverSplitsAUtf8Character) {
  // "é" is two bytes (C3 A9): placed so that the limit falls between them, it goes whole.
  const std::string text = std::string(max_detail_bytes - 1, 'a') + "\xC3\xA9" + "tail";
  EXPECT_EQ(clip_detail(text), std::string(max_detail_bytes - 1, 'a'));
  // "€" is three bytes (E2 82 AC): limit after its second byte.
  const std::string euro = std::string(max_detail_bytes - 2, 'a') + "\xE2\x82\xAC";
  EXPECT_EQ(clip_detail(euro), std::string(max_detail_bytes - 2, 'a'));
  // A character that ends exactly at the limit stays.
  const std::string fits = std::string(max_detail_bytes - 2, 'a') + "\xC3\xA9" + "b";
  EXPECT_EQ(clip_detail(fits), std::string(max_detail_bytes - 2, 'a') + "\xC3\xA9");
}

TEST(CompletionDetail, OutcomeTextAndFailureLineNameTheErrorAndTheDetail) {
  job_result ok{.job = 3, .kind = transfer_kind::load, .ok = true};
  EXPECT_EQ(outcome_text(ok), "ok");
  job_result bare{.job = 7, .kind = transfer_kind::store, .ok = false, .error = errc::timeout};
  EXPECT_EQ(failure_line(bare), "job 7 (store) failed: timeout");
  job_result cuda{.job = 9,
                  .kind = transfer_kind::load,
                  .ok = false,
                  .error = errc::device_error,
                  .detail = "rank 1: cudaEventQuery returned cudaErrorIllegalAddress (700)"};
  EXPECT_EQ(outcome_text(cuda),
            "device_error: rank 1: cudaEventQuery returned cudaErrorIllegalAddress (700)");
  EXPECT_EQ(failure_line(cuda),
            "job 9 (load) failed: device_error: rank 1: cudaEventQuery returned "
            "cudaErrorIllegalAddress (700)");
}

TEST(CompletionDetail, ARanksResultHasTheSameOutcomeTextAndFailureLine) {
  rank_job_result ok{.job = 3, .kind = transfer_kind::load, .ok = true};
  EXPECT_EQ(outcome_text(ok), "ok");
  rank_job_result failed{.job = 9,
                         .kind = transfer_kind::store,
                         .ok = false,
                         .error = errc::injected_fault,
                         .detail = "faulty copy engine: injected fail_at_completion"};
  EXPECT_EQ(failure_line(failed),
            "job 9 (store) failed: injected_fault: faulty copy engine: injected "
            "fail_at_completion");
}

// One rank's result reaches the coordinator only as a completion_event (completion_stamper);
// neither result type stands in for the other.
static_assert(!std::is_same_v<rank_job_result, job_result>);
static_assert(!std::is_convertible_v<rank_job_result, job_result>);
static_assert(!std::is_convertible_v<job_result, rank_job_result>);
static_assert(!std::is_constructible_v<job_result, rank_job_result>);
static_assert(!std::is_constructible_v<rank_job_result, job_result>);

}  // namespace
}  // namespace kvc
