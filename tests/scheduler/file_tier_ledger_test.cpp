#include "actors/scheduler/file_tier_ledger.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace kvc::scheduler {
namespace {

block_key key(uint64_t i) { return block_key::from_index(i); }

std::vector<block_key> keys(std::initializer_list<uint64_t> ids) {
  std::vector<block_key> out;
  for (uint64_t i : ids) out.push_back(key(i));
  return out;
}

/// A ledger of `blocks` block files of 100 bytes and at most `pending` cascades in flight.
file_tier_ledger make(uint32_t blocks, uint32_t pending = 64) {
  auto l = file_tier_ledger::create({.capacity_bytes = blocks * 100ULL + 99,
                                     .block_file_bytes = 100,
                                     .max_pending_cascades = pending});
  EXPECT_TRUE(l.ok()) << l.error().to_string();
  return std::move(l).value();
}

std::vector<block_key> offer(file_tier_ledger& l, std::initializer_list<uint64_t> ids) {
  const auto k = keys(ids);
  const auto accepted = l.offer_cascade(k);
  return {accepted.begin(), accepted.end()};
}

/// Offers and completes the cascades of `ids` successfully.
void store(file_tier_ledger& l, std::initializer_list<uint64_t> ids) {
  for (const block_key& k : offer(l, ids)) ASSERT_TRUE(l.complete_cascade(k, true).ok());
}

/// Lookup until the check of the file answered `found` (one ask-again round).
tier_lookup lookup_checked(file_tier_ledger& l, uint64_t id, bool found, const char* req = "r") {
  EXPECT_EQ(l.lookup(key(id), req), tier_lookup::ask_again);
  for (const block_key& k : l.take_lookup_batch()) l.on_lookup_result(k, found);
  return l.lookup(key(id), req);
}

TEST(FileTierLedgerTest, RefusesLimitsThatHoldNoBlock) {
  EXPECT_EQ(file_tier_ledger::create({.capacity_bytes = 99, .block_file_bytes = 100,
                                      .max_pending_cascades = 1}).code(),
            errc::invalid_argument);
  EXPECT_EQ(file_tier_ledger::create({.capacity_bytes = 100, .block_file_bytes = 0,
                                      .max_pending_cascades = 1}).code(),
            errc::invalid_argument);
  EXPECT_EQ(file_tier_ledger::create({.capacity_bytes = 100, .block_file_bytes = 100,
                                      .max_pending_cascades = 0}).code(),
            errc::invalid_argument);
  auto l = make(3);
  EXPECT_EQ(l.capacity_blocks(), 3u);  // 399 bytes hold 3 files of 100
}

TEST(FileTierLedgerTest, CascadesOnlyBlocksNotTrackedYet) {
  auto l = make(10);
  EXPECT_EQ(offer(l, {1, 2, 2}), keys({1, 2}));  // a repeated key is written once
  EXPECT_EQ(l.pending_cascades(), 2u);
  EXPECT_EQ(offer(l, {1, 3}), keys({3}));  // 1 is being written: not again
  ASSERT_TRUE(l.complete_cascade(key(1), true).ok());
  EXPECT_EQ(offer(l, {1}), keys({}));  // 1 is on disk
  EXPECT_TRUE(l.ready(key(1)));
  EXPECT_FALSE(l.ready(key(2)));
  EXPECT_EQ(l.stats().cascades_offered, 6u);
  EXPECT_EQ(l.stats().cascades_started, 3u);
  EXPECT_EQ(l.stats().cascades_skipped_queue_full, 0u);
}

TEST(FileTierLedgerTest, CompletedCascadeGivesOneStoredEventAndFailedOneDropsTheBlock) {
  auto l = make(10);
  offer(l, {1, 2});
  ASSERT_TRUE(l.complete_cascade(key(1), true).ok());
  ASSERT_TRUE(l.complete_cascade(key(2), false).ok());
  EXPECT_EQ(l.complete_cascade(key(2), true).code(), errc::precondition_failed);
  EXPECT_EQ(l.complete_cascade(key(1), true).code(), errc::precondition_failed);
  const auto ev = l.take_events();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0], (kv_event{kv_event_kind::stored, medium::fs, keys({1})}));
  EXPECT_EQ(l.take_removed(), keys({2}));  // a torn temp file may be left: removed
  EXPECT_EQ(l.size(), 1u);
  EXPECT_EQ(l.stats().cascades_failed, 1u);
  EXPECT_EQ(l.pending_cascades(), 0u);
  EXPECT_EQ(offer(l, {2}), keys({2}));  // a later offer may write it again
}

TEST(FileTierLedgerTest, BackPressureSkipsAndCountsOffersPastTheBound) {
  auto l = make(100, /*pending=*/2);
  EXPECT_EQ(offer(l, {1, 2, 3, 4}), keys({1, 2}));
  EXPECT_EQ(l.stats().cascades_skipped_queue_full, 2u);
  EXPECT_EQ(l.lookup(key(3), "r"), tier_lookup::miss);  // a skipped block is not tracked
  ASSERT_TRUE(l.complete_cascade(key(1), true).ok());
  EXPECT_EQ(offer(l, {3, 4}), keys({3}));  // one place freed
  EXPECT_EQ(l.stats().cascades_skipped_queue_full, 3u);
  EXPECT_EQ(l.pending_cascades(), 2u);
}

TEST(FileTierLedgerTest, CapacityEvictsTheLeastRecentIdleBlock) {
  auto l = make(3);
  store(l, {1, 2, 3});
  EXPECT_EQ(l.lru_order(), keys({1, 2, 3}));
  EXPECT_EQ(lookup_checked(l, 1, true), tier_lookup::hit);  // a hit makes 1 most recent
  EXPECT_EQ(l.lru_order(), keys({2, 3, 1}));
  l.take_events();
  EXPECT_EQ(offer(l, {4}), keys({4}));
  EXPECT_EQ(l.take_removed(), keys({2}));
  EXPECT_EQ(l.stats().evictions, 1u);
  const auto ev = l.take_events();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0], (kv_event{kv_event_kind::removed, medium::fs, keys({2})}));
  EXPECT_EQ(l.size(), 3u);
}

TEST(FileTierLedgerTest, WritingAndReadBlocksAreNeverEvicted) {
  auto l = make(2);
  store(l, {1});
  offer(l, {2});  // writing
  ASSERT_EQ(lookup_checked(l, 1, true), tier_lookup::hit);
  ASSERT_TRUE(l.begin_promotion(key(1)).ok());  // read
  EXPECT_EQ(offer(l, {3}), keys({}));
  EXPECT_EQ(l.stats().cascades_skipped_no_room, 1u);
  EXPECT_TRUE(l.take_removed().empty());
  ASSERT_TRUE(l.complete_promotion(key(1), true).ok());
  EXPECT_EQ(offer(l, {3}), keys({3}));  // 1 is idle again: evicted
  EXPECT_EQ(l.take_removed(), keys({1}));
}

TEST(FileTierLedgerTest, LookupMissesAtOnceForAnUntrackedKey) {
  auto l = make(4);
  EXPECT_EQ(l.lookup(key(9), "r"), tier_lookup::miss);
  EXPECT_TRUE(l.take_lookup_batch().empty());  // nothing to check on disk
  EXPECT_EQ(l.lookup_states(), 0u);
  EXPECT_EQ(l.stats().queries, 1u);
}

TEST(FileTierLedgerTest, LookupAsksAgainUntilTheFileCheckAnswers) {
  auto l = make(4);
  store(l, {1});
  EXPECT_EQ(l.lookup(key(1), "a"), tier_lookup::ask_again);
  EXPECT_EQ(l.lookup(key(1), "b"), tier_lookup::ask_again);
  EXPECT_EQ(l.take_lookup_batch(), keys({1}));  // queued once for both requests
  EXPECT_EQ(l.lookup(key(1), "a"), tier_lookup::ask_again);
  EXPECT_TRUE(l.take_lookup_batch().empty());
  l.on_lookup_result(key(1), true);
  EXPECT_EQ(l.lookup(key(1), "a"), tier_lookup::hit);
  EXPECT_EQ(l.lookup(key(1), "b"), tier_lookup::hit);
  EXPECT_EQ(l.stats().hits, 2u);
  EXPECT_EQ(l.stats().queries, 2u);  // the answers hit / miss, not the ask-agains
}

TEST(FileTierLedgerTest, LookupOfABlockBeingWrittenAsksAgainWithoutACheck) {
  auto l = make(4);
  offer(l, {1});
  EXPECT_EQ(l.lookup(key(1), "r"), tier_lookup::ask_again);
  EXPECT_TRUE(l.take_lookup_batch().empty());
  ASSERT_TRUE(l.complete_cascade(key(1), true).ok());
  EXPECT_EQ(lookup_checked(l, 1, true), tier_lookup::hit);
}

TEST(FileTierLedgerTest, AFileFoundMissingIsAMissAndTheBlockIsDropped) {
  auto l = make(4);
  store(l, {1});
  l.take_events();
  EXPECT_EQ(lookup_checked(l, 1, false), tier_lookup::miss);
  EXPECT_FALSE(l.ready(key(1)));
  EXPECT_EQ(l.take_removed(), keys({1}));
  EXPECT_EQ(l.stats().dropped_bad_file, 1u);
  ASSERT_EQ(l.take_events().size(), 1u);  // removed
}

TEST(FileTierLedgerTest, RequestFinishedForgetsVerdictsOnlyItNeeded) {
  auto l = make(4);
  store(l, {1, 2});
  EXPECT_EQ(lookup_checked(l, 1, true, "a"), tier_lookup::hit);
  EXPECT_EQ(l.lookup(key(1), "b"), tier_lookup::hit);
  EXPECT_EQ(lookup_checked(l, 2, true, "a"), tier_lookup::hit);
  EXPECT_EQ(l.lookup_states(), 2u);
  l.request_finished("a");
  EXPECT_EQ(l.lookup_states(), 1u);  // b still needs 1's verdict
  EXPECT_EQ(l.lookup(key(1), "b"), tier_lookup::hit);
  l.request_finished("b");
  EXPECT_EQ(l.lookup_states(), 0u);
  EXPECT_EQ(l.lookup(key(1), "c"), tier_lookup::ask_again);  // a fresh check
  l.request_finished("unknown");  // ignored
}

TEST(FileTierLedgerTest, ALateCheckResultForAForgottenKeyChangesNoVerdict) {
  auto l = make(4);
  store(l, {1});
  EXPECT_EQ(l.lookup(key(1), "a"), tier_lookup::ask_again);
  const auto batch = l.take_lookup_batch();
  l.request_finished("a");
  l.on_lookup_result(batch.at(0), true);
  EXPECT_EQ(l.lookup_states(), 0u);
  EXPECT_TRUE(l.ready(key(1)));
}

TEST(FileTierLedgerTest, SuccessfulPromotionKeepsTheBlockMostRecent) {
  auto l = make(4);
  store(l, {1, 2});
  ASSERT_EQ(lookup_checked(l, 1, true), tier_lookup::hit);
  store(l, {3});
  ASSERT_TRUE(l.begin_promotion(key(1)).ok());
  EXPECT_EQ(l.readers(key(1)), 1u);
  ASSERT_TRUE(l.complete_promotion(key(1), true).ok());
  EXPECT_EQ(l.readers(key(1)), 0u);
  EXPECT_EQ(l.lru_order(), keys({2, 3, 1}));
  EXPECT_EQ(l.stats().promotions_ok, 1u);
  EXPECT_EQ(l.complete_promotion(key(1), true).code(), errc::precondition_failed);
}

TEST(FileTierLedgerTest, FailedPromotionIsAMissAndDropsTheBlock) {
  auto l = make(4);
  store(l, {1});
  ASSERT_EQ(lookup_checked(l, 1, true), tier_lookup::hit);
  ASSERT_TRUE(l.begin_promotion(key(1)).ok());
  ASSERT_TRUE(l.complete_promotion(key(1), false).ok());
  EXPECT_EQ(l.lookup(key(1), "r"), tier_lookup::miss);  // recomputed, never promoted again
  EXPECT_EQ(l.take_removed(), keys({1}));
  EXPECT_EQ(l.stats().promotions_failed, 1u);
  EXPECT_EQ(l.begin_promotion(key(1)).code(), errc::precondition_failed);
}

TEST(FileTierLedgerTest, ABlockFailingOneOfTwoPromotionsIsDroppedAfterTheLast) {
  auto l = make(4);
  store(l, {1});
  ASSERT_EQ(lookup_checked(l, 1, true), tier_lookup::hit);
  ASSERT_TRUE(l.begin_promotion(key(1)).ok());
  ASSERT_TRUE(l.begin_promotion(key(1)).ok());
  ASSERT_TRUE(l.complete_promotion(key(1), false).ok());
  EXPECT_TRUE(l.take_removed().empty());  // still read by the other promotion
  EXPECT_EQ(l.begin_promotion(key(1)).code(), errc::precondition_failed);
  EXPECT_EQ(l.lookup(key(1), "s"), tier_lookup::miss);
  ASSERT_TRUE(l.complete_promotion(key(1), true).ok());
  EXPECT_EQ(l.take_removed(), keys({1}));
  EXPECT_EQ(l.size(), 0u);
}

TEST(FileTierLedgerTest, PromotionNeedsAReadyBlock) {
  auto l = make(4);
  EXPECT_EQ(l.begin_promotion(key(1)).code(), errc::precondition_failed);
  offer(l, {1});
  EXPECT_EQ(l.begin_promotion(key(1)).code(), errc::precondition_failed);  // being written
}

TEST(FileTierLedgerTest, AHitVerdictOfAnEvictedBlockBecomesAMiss) {
  auto l = make(1);
  store(l, {1});
  ASSERT_EQ(lookup_checked(l, 1, true), tier_lookup::hit);
  store(l, {2});  // evicts 1
  EXPECT_EQ(l.take_removed(), keys({1}));
  EXPECT_EQ(l.lookup(key(1), "r"), tier_lookup::miss);
}

TEST(FileTierLedgerTest, AdoptTracksFoundBlocksAndEvictsTheOldestBeyondCapacity) {
  auto l = make(2);
  l.adopt(keys({5, 6, 7}));
  EXPECT_EQ(l.lru_order(), keys({6, 7}));
  EXPECT_EQ(l.take_removed(), keys({5}));
  EXPECT_TRUE(l.ready(key(6)));
  EXPECT_EQ(offer(l, {6}), keys({}));  // found on disk: not written again
  EXPECT_EQ(lookup_checked(l, 7, true), tier_lookup::hit);
}

TEST(FileTierLedgerTest, CountsPoolEvictionsOfBlocksWithoutAFile) {
  auto l = make(4);
  store(l, {1});
  l.on_pool_evicted(keys({1, 2, 3}));
  EXPECT_EQ(l.stats().pool_evictions_without_file, 2u);
}

}  // namespace
}  // namespace kvc::scheduler
