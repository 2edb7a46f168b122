// IdBatches: a job is asked for only when none runs or the queue outgrows the running jobs'
// batches; jobs take at most a batch at a time and end when the queue is empty; a job that
// could not be started is asked for again by the next push; past its bound, ids are dropped;
// no more jobs than its limit run at once.
#include "prefetch/id_batches.h"

#include <catch2/catch.hpp>

namespace epochfs::prefetch {
namespace {

TEST_CASE("one job takes a whole run of pushes, a batch at a time", "[id_batches]") {
  IdBatches q(4);
  CHECK(q.push(1));  // no job runs: start one
  for (cachestore::FileId id = 2; id <= 4; ++id) {
    CHECK_FALSE(q.push(id));  // the running job will take them
  }
  CHECK(q.take() == std::vector<cachestore::FileId>{1, 2, 3, 4});
  CHECK_FALSE(q.push(5));  // the job has not ended: it takes this one too
  CHECK(q.take() == std::vector<cachestore::FileId>{5});
  CHECK(q.take().empty());  // the job ends
  CHECK(q.push(6));         // so the next push starts another
}

TEST_CASE("a queue longer than the running jobs' batches asks for another job", "[id_batches]") {
  IdBatches q(2);
  CHECK(q.push(1));
  CHECK_FALSE(q.push(2));
  CHECK(q.push(3));  // 3 queued > 1 job x 2
  CHECK_FALSE(q.push(4));
  CHECK(q.push(5));  // 5 > 2 jobs x 2
  CHECK(q.queued() == 5);
}

TEST_CASE("no more jobs than the limit run, however long the queue", "[id_batches]") {
  IdBatches q(2, SIZE_MAX, 2);
  CHECK(q.push(1));
  CHECK_FALSE(q.push(2));
  CHECK(q.push(3));  // 3 queued > 1 job x 2
  for (cachestore::FileId id = 4; id <= 20; ++id) {
    CHECK_FALSE(q.push(id));  // two run: the limit
  }
  CHECK(q.queued() == 20);
  while (!q.take().empty()) {  // one job drains it and ends
  }
  CHECK(q.take().empty());  // the other ends
  CHECK(q.push(21));
}

TEST_CASE("a job that could not be started is asked for by the next push", "[id_batches]") {
  IdBatches q(8);
  REQUIRE(q.push(1));
  q.not_started();  // the stager was full
  CHECK(q.push(2));
  CHECK(q.take() == std::vector<cachestore::FileId>{1, 2});
  CHECK(q.take().empty());
}

TEST_CASE("ids past the queue's bound are dropped", "[id_batches]") {
  IdBatches q(2, 3);
  CHECK(q.push(1));
  CHECK_FALSE(q.push(2));
  CHECK(q.push(3));        // more than one job's batch: a second job
  CHECK_FALSE(q.push(4));  // dropped: 3 queued
  CHECK(q.queued() == 3);
  CHECK(q.take() == std::vector<cachestore::FileId>{1, 2});
  q.push(5);
  CHECK(q.take() == std::vector<cachestore::FileId>{3, 5});
}

}  // namespace
}  // namespace epochfs::prefetch
