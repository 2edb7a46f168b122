// Jobs on a shared mount (prefetch/jobs.h), through the Planner: whose stream and manifest an
// upload reaches, the limits and what a refusal says, and the end of a job whose processes exit.
#include <errno.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "prefetch/file_registry.h"
#include "prefetch/order_upload.h"
#include "prefetch/planner.h"
#include "prefetch/user_ledger.h"
#include "test/prefetch/publishers.h"

namespace epochfs::prefetch {
namespace {

// Publishes text through an upload, as a write into .epochfs/ would.
PublishReport upload(Planner& planner, FileRegistry& registry, const Publisher& who,
                     const std::string& text, bool manifest = false) {
  OrderUpload u(manifest ? OrderUpload::Kind::kManifest : OrderUpload::Kind::kOrder, who, registry,
                planner);
  REQUIRE(u.write(0, text).is_ok());
  return u.finish();
}

const StreamStats* stream_named(const PlannerStats& s, uid_t uid, const std::string& job,
                                const std::string& name) {
  for (const auto& st : s.streams) {
    if (st.uid == uid && st.job == job && st.name == name) {
      return &st;
    }
  }
  return nullptr;
}

TEST_CASE("two jobs may use the same stream names without touching each other", "[jobs]") {
  Planner planner(PlannerOptions{});
  CHECK(planner.publish(user(1000), header("a", "rank0", 3), {1, 2}, {}).ok);
  CHECK(planner.publish(user(1000), header("b", "rank0", 0), {3}, {}).ok);
  CHECK(planner.publish(user(1001), header("a", "rank0", 7), {4}, {}).ok);
  const auto s = planner.stats();
  REQUIRE(s.streams.size() == 3);
  CHECK(s.jobs == 3);
  CHECK(stream_named(s, 1000, "a", "rank0")->view.epoch == 3);
  CHECK(stream_named(s, 1000, "b", "rank0")->view.epoch == 0);
  CHECK(stream_named(s, 1001, "a", "rank0")->view.epoch == 7);
  // Without #job, the writer's session is the job.
  CHECK(planner.publish(user(1000, 42), header(std::nullopt, "rank0"), {5}, {}).ok);
  CHECK(stream_named(planner.stats(), 1000, "session-42", "rank0") != nullptr);
}

TEST_CASE("a job's loaders keep their own manifests", "[jobs]") {
  Planner planner(PlannerOptions{});
  FileRegistry registry;
  const Publisher me = user(1000);
  REQUIRE(upload(planner, registry, me, "#job j\n#manifest train\nt0\nt1\n", true).ok);
  REQUIRE(upload(planner, registry, me, "#job j\n#manifest val\nv0\nv1\nv2\n", true).ok);
  auto r =
      upload(planner, registry, me, "#job j\n#manifest val\n#stream val\n#form indices\n2\n0\n");
  REQUIRE(r.ok);
  r = upload(planner, registry, me, "#job j\n#manifest train\n#stream train\n#form indices\n1\n");
  REQUIRE(r.ok);
  // The manifest of another job, or of another user, is not found.
  r = upload(planner, registry, user(1001), "#job j\n#manifest val\n#form indices\n0\n");
  CHECK_FALSE(r.ok);
  CHECK(planner.on_open(*registry.find("v2")).has_value());
  CHECK(planner.on_open(*registry.find("t1")).has_value());
  CHECK(planner.stats().manifest_entries == 5);
}

TEST_CASE("one user's jobs together hold at most their streams, others get theirs", "[jobs]") {
  PlannerOptions options;
  options.limits.streams_per_user = 3;
  Planner planner(options);
  CHECK(planner.publish(user(1000), header("a", "s0"), {1}, {}).ok);
  CHECK(planner.publish(user(1000), header("a", "s1"), {1}, {}).ok);
  CHECK(planner.publish(user(1000), header("b", "s0"), {1}, {}).ok);
  auto r = planner.publish(user(1000), header("c", "s0"), {1}, {});
  CHECK_FALSE(r.ok);
  CHECK_THAT(r.message, Catch::Contains("--max-streams-per-user 3"));
  CHECK(planner.publish(user(1000), header("a", "s1"), {2}, {}).ok);  // an existing stream
  CHECK(planner.publish(user(1001), header("a", "s0"), {1}, {}).ok);
}

TEST_CASE("an order repeating one file keeps a bounded number of its occurrences", "[jobs]") {
  Planner planner(PlannerOptions{});
  // One path a million times, as a hostile order might: an open of it must not walk them all.
  std::vector<FileId> entries(1'000'000, 7);
  entries.push_back(8);
  const auto r = planner.publish(user(1000), header("a", "s0"), std::move(entries), {});
  REQUIRE(r.ok);
  CHECK(r.accepted == Schedule::kMaxRepeats + 1);
  CHECK(r.rejects.total == 1'000'000 - Schedule::kMaxRepeats);
  CHECK_THAT(r.rejects.examples.at(0), Catch::Contains("repeat a file more than 16 times"));
  CHECK(planner.stats().schedule_entries == Schedule::kMaxRepeats + 1);
  // Opens of it are matched, 16 of them; the rest are outside the order.
  for (int i = 0; i < Schedule::kMaxRepeats; ++i) {
    CHECK(planner.on_open(7, 1000).has_value());
  }
}

TEST_CASE("limits refuse a publish and say which and by how much", "[jobs]") {
  PlannerOptions options;
  options.limits.streams_per_job = 2;
  options.limits.jobs_per_user = 2;
  options.limits.entries_per_user = 10;
  Planner planner(options);
  FileRegistry registry;
  CHECK(planner.publish(user(1000), header("a", "s0"), {1, 2, 3}, {}).ok);
  CHECK(planner.publish(user(1000), header("a", "s1"), {1, 2, 3}, {}).ok);
  auto r = planner.publish(user(1000), header("a", "s2"), {1}, {});
  CHECK_FALSE(r.ok);
  CHECK_THAT(r.message, Catch::Contains("--max-streams-per-job 2"));
  CHECK(planner.publish(user(1000), header("b", "s0"), {1}, {}).ok);
  r = planner.publish(user(1000), header("c", "s0"), {1}, {});
  CHECK_THAT(r.message, Catch::Contains("--max-jobs-per-user 2"));
  // 7 entries held; 5 more would be 12: two over.
  r = planner.publish(user(1000), header("b", "s1"), {1, 2, 3, 4, 5}, {});
  CHECK_FALSE(r.ok);
  CHECK_THAT(r.message, Catch::Contains("would hold 12") && Catch::Contains("2 over"));
  // Another user is not held back by the first one's use.
  CHECK(planner.publish(user(1001), header("a", "s0"), {1, 2, 3, 4, 5, 6, 7, 8}, {}).ok);
  // A refused upload leaves no path behind in the registry, nor an empty job.
  const size_t known = registry.size();
  CHECK_FALSE(upload(planner, registry, user(1000), "#job d\nnew0\nnew1\n").ok);
  CHECK(registry.size() == known);
  CHECK(planner.stats().jobs == 3);
  CHECK(planner.stats().publishes_over_limit == 4);
}

TEST_CASE("all users' orders together stay within the mount's entry limit", "[jobs]") {
  PlannerOptions options;
  options.limits.entries_per_user = 10;
  options.limits.entries = 15;
  Planner planner(options);
  CHECK(planner.publish(user(1000), header("a", "s0"), {1, 2, 3, 4, 5, 6, 7, 8}, {}).ok);
  // Within the second user's own limit, but past the mount's: refused, and says so.
  auto r = planner.publish(user(1001), header("a", "s0"), {1, 2, 3, 4, 5, 6, 7, 8}, {});
  CHECK_FALSE(r.ok);
  CHECK_THAT(r.message, Catch::Contains("--max-entries 15") && Catch::Contains("would hold 16"));
  // The mount's own order (--shuffle-file) is the operator's: not counted against users.
  CHECK(planner.publish(Publisher::mount(), header(std::nullopt, "default"), {1, 2, 3}, {}).ok);
  CHECK(planner.publish(user(1001), header("a", "s0"), {1, 2, 3, 4, 5, 6, 7}, {}).ok);
}

TEST_CASE("a job ends when its processes have exited, and its streams go", "[jobs]") {
  Planner planner(PlannerOptions{});
  CHECK(planner.publish(exited(1000), header("gone", "rank0"), {1, 2}, {}).ok);
  CHECK(planner.publish(user(1000), header("here", "rank0"), {2, 3}, {}).ok);
  CHECK(planner.publish(Publisher::mount(), header(std::nullopt, "default"), {4}, {}).ok);
  CHECK(planner.next_use(1) != Schedule::kNever);
  planner.end_finished_jobs();
  const auto s = planner.stats();
  CHECK(s.jobs_ended == 1);
  CHECK(s.jobs == 2);
  CHECK(stream_named(s, 1000, "gone", "rank0") == nullptr);
  CHECK(stream_named(s, 1000, "here", "rank0") != nullptr);
  CHECK(planner.next_use(1) == Schedule::kNever);  // its copies are ordinary cache entries
  CHECK(planner.next_use(3) != Schedule::kNever);
  // The freed slot serves the next new stream from its start.
  CHECK(planner.publish(user(1000), header("next", "rank0", 4), {5}, {}).ok);
  CHECK(stream_named(planner.stats(), 1000, "next", "rank0")->view.epoch == 4);
}

TEST_CASE("a job idle for its timeout ends even with its processes alive", "[jobs]") {
  PlannerOptions options;
  options.limits.idle_timeout_s = 0.001;
  Planner planner(options);
  CHECK(planner.publish(user(1000), header("quiet", "rank0"), {1}, {}).ok);
  CHECK(planner.publish(Publisher::mount(), header(std::nullopt, "default"), {2}, {}).ok);
  ::usleep(5000);
  planner.end_finished_jobs();
  CHECK(planner.stats().jobs_ended == 1);  // the mount's own job never ends
  CHECK(planner.stats().streams.size() == 1);
}

TEST_CASE("process identities survive pid reuse", "[jobs]") {
  auto me = process_of(::getpid());
  REQUIRE(me.has_value());
  CHECK(alive(*me));
  CHECK_FALSE(alive(ProcessRef{me->pid, me->start_ticks + 1}));
  CHECK_FALSE(process_of(0).has_value());
}

TEST_CASE("another user's opens never move a job's stream", "[jobs]") {
  Planner planner(PlannerOptions{});
  REQUIRE(planner.publish(user(1000), header("a", "rank0", 0), {1, 2, 3}, {}).ok);
  REQUIRE(planner.publish(Publisher::mount(), header(std::nullopt, "default", 0), {7}, {}).ok);
  CHECK_FALSE(planner.on_open(1, uid_t{1001}).has_value());
  CHECK(stream_named(planner.stats(), 1000, "a", "rank0")->view.position == 0);
  CHECK(planner.on_open(1, uid_t{1000}).has_value());
  CHECK(stream_named(planner.stats(), 1000, "a", "rank0")->view.position == 1);
  // The mount's own stream (--shuffle-file) follows every user's opens.
  CHECK(planner.on_open(7, uid_t{1001}).has_value());
}

TEST_CASE("an epoch's opens counted after its last one's are still that epoch's", "[jobs]") {
  // Two loader workers: one opens the epoch's last file while the other's open, matched
  // before, has not been counted yet. Either count may come first.
  Planner planner(PlannerOptions{});
  REQUIRE(planner.publish(user(1000), header("a", "s", 0), {1, 2, 3}, {}).ok);
  REQUIRE(planner.publish(user(1000), header("a", "s", 1), {3, 2, 1}, {}).ok);
  auto first = planner.on_open(1, uid_t{1000});
  REQUIRE(first.has_value());
  planner.count_open(*first, OpenOutcome{});
  auto second = planner.on_open(2, uid_t{1000});
  auto last = planner.on_open(3, uid_t{1000});  // ends epoch 0
  REQUIRE((second.has_value() && last.has_value()));
  planner.count_open(*second, OpenOutcome{});
  planner.count_open(*last, OpenOutcome{});
  const PlannerStats stats = planner.stats();
  const auto* st = stream_named(stats, 1000, "a", "s");
  REQUIRE(st->history.size() == 1);
  CHECK(st->history[0].opens == 3);
  CHECK(st->current.epoch == 1);
  CHECK(st->current.opens == 0);
}

TEST_CASE("an epoch's last open is counted in that epoch", "[jobs]") {
  Planner planner(PlannerOptions{});
  REQUIRE(planner.publish(user(1000), header("a", "s", 0), {1, 2}, {}).ok);
  REQUIRE(planner.publish(user(1000), header("a", "s", 1), {2, 1}, {}).ok);
  for (FileId f : {1, 2}) {
    auto s = planner.on_open(f, uid_t{1000});
    REQUIRE(s.has_value());
    planner.count_open(*s, OpenOutcome{true, false, 0});
  }
  const PlannerStats stats = planner.stats();
  const auto* st = stream_named(stats, 1000, "a", "s");
  REQUIRE(st->history.size() == 1);
  CHECK(st->history[0].epoch == 0);
  CHECK(st->history[0].opens == 2);
  CHECK(st->current.epoch == 1);
  CHECK(st->current.opens == 0);
}

TEST_CASE("a restarted stream keeps its totals and names each finished epoch once", "[jobs]") {
  Planner planner(PlannerOptions{});
  const auto run = [&](uint64_t first) {
    REQUIRE(planner.publish(user(1000), header("a", "s", first), {1, 2}, {}).ok);
    REQUIRE(planner.publish(user(1000), header("a", "s", first + 1), {3, 4}, {}).ok);
    for (FileId f : {1, 2, 3}) {
      auto s = planner.on_open(f, uid_t{1000});
      REQUIRE(s.has_value());
      planner.count_open(*s, OpenOutcome{});
    }
  };
  run(0);
  run(0);  // the same job again, from epoch 0: a restart
  const PlannerStats stats = planner.stats();
  const auto* st = stream_named(stats, 1000, "a", "s");
  CHECK(st->restarts == 1);
  CHECK(st->total.opens == 6);
  REQUIRE(st->history.size() == 1);
  CHECK(st->history[0].epoch == 0);
}

TEST_CASE("an ended job's manifest stops holding its ids, however often it names one", "[jobs]") {
  Planner planner{PlannerOptions{}};
  // A manifest of ranges: one block named once per sample, 70,000 samples in a row.
  std::vector<FileId> manifest(70000, 5);
  manifest.push_back(6);
  REQUIRE(
      planner.publish_manifest(exited(1000), header("j", std::nullopt), Manifest{manifest, {}}, {})
          .ok);
  CHECK(planner.order_holds(5));
  CHECK(planner.order_holds(6));
  planner.end_finished_jobs();
  CHECK_FALSE(planner.order_holds(5));
  CHECK_FALSE(planner.order_holds(6));
}

TEST_CASE("the paths an ended job's uploads registered become candidates to forget", "[jobs]") {
  Planner planner{PlannerOptions{}};
  FileRegistry registry;
  UserLedger paths("bytes of paths", "--max-path-memory-per-user", 1 << 20, "--max-path-memory",
                   1 << 20);
  const Publisher who = exited(1000);
  {
    OrderUpload u(OrderUpload::Kind::kOrder, who, registry, planner, nullptr, UINT64_MAX, &paths);
    REQUIRE(u.write(0, "#job j\nnew/a\nnew/b\n").is_ok());
    REQUIRE(u.finish().ok);
  }
  CHECK(planner.take_candidates(10).empty());  // the job lives: it holds them
  CHECK(planner.order_holds(*registry.find("new/a")));
  planner.end_finished_jobs();
  CHECK_FALSE(planner.order_holds(*registry.find("new/a")));
  const auto candidates = planner.take_candidates(10);
  REQUIRE(candidates.size() == 2);
  CHECK(candidates[0].uid == 1000);
  CHECK(planner.take_candidates(10).empty());
}

}  // namespace
}  // namespace epochfs::prefetch
