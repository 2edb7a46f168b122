// A mount shared by many jobs (docs/semantics.md, "A mount shared by jobs and users"): a job's
// streams end with its processes, a rerun of the same job starts cleanly, and lookups of
// missing names leave nothing behind. The Python client's side (samplers run as an ordinary
// user) is in tools/python/tests.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "test/mount/mount_fixture.h"
#include "tools/cli/stats_doc.h"

namespace epochfs::test {
namespace {

std::string order_of(int first, int count, const std::string& header) {
  std::string text = header;
  for (int i = first; i < first + count; ++i) {
    text += "f" + std::to_string(i) + "\n";
  }
  return text;
}

TEST_CASE("a job killed with SIGKILL has its streams dropped", "[mount][shared]") {
  TempDir dir;
  write_files(dir / "src", 20, 1000);
  Mount mount(dir / "src", dir / "mnt");
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t job = ::fork();
  REQUIRE(job >= 0);
  if (job == 0) {
    // The job: publishes for itself (#job anchors the job on this process), then trains.
    const int err = write_order(mount, order_of(0, 10, "#job killed\n#stream rank0\n"));
    const char byte = err == 0 ? 'y' : 'n';
    (void)!::write(ready[1], &byte, 1);
    ::pause();
    _exit(0);
  }
  ::close(ready[1]);
  char byte = 0;
  REQUIRE(::read(ready[0], &byte, 1) == 1);
  ::close(ready[0]);
  CHECK(byte == 'y');
  // Another job of the same user, publishing from this (living) process: it stays.
  REQUIRE(publish(mount, order_of(10, 10, "#job alive\n#stream rank0\n")) == 0);
  CHECK(stat_of(mount, "prefetch.jobs") == 2);
  ::kill(job, SIGKILL);
  ::waitpid(job, nullptr, 0);
  CHECK(wait_for_stat(mount, "prefetch.jobs_ended", 1) == 1);
  CHECK(stat_of(mount, "prefetch.jobs") == 1);
  auto doc = tools::read_stats(mount.path());
  REQUIRE(doc.has_value());
  int streams = 0;
  for (const auto& [key, value] : doc->values) {
    if (key.rfind("prefetch.streams.", 0) == 0 && key.size() > 4 &&
        key.compare(key.size() - 4, 4, ".job") == 0) {
      ++streams;
      CHECK(value == "alive");
    }
  }
  CHECK(streams == 1);
}

TEST_CASE("the same job run twice starts cleanly and is staged from its first epoch",
          "[mount][shared]") {
  TempDir dir;
  write_files(dir / "src", 40, 4000);
  Mount mount(dir / "src", dir / "mnt");
  for (int run = 0; run < 2; ++run) {
    INFO("run " << run);
    // Each run publishes epochs 0 and 1 as the samplers do. The first reads epoch 0 and half of
    // epoch 1, so the second run's epoch 0 is older than the stream's current one; the second
    // reads all but the last file of epoch 0 (the last would move the stream on to epoch 1).
    REQUIRE(publish(mount, order_of(0, 20, "#job rerun\n#stream rank0\n#epoch 0\n")) == 0);
    REQUIRE(publish(mount, order_of(20, 20, "#job rerun\n#stream rank0\n#epoch 1\n")) == 0);
    CHECK(stat_of(mount, "prefetch.streams.rank0.epoch") == 0);
    wait_for_staging(mount);
    for (int i = 0; i < (run == 0 ? 30 : 19); ++i) {
      check_same(mount / ("f" + std::to_string(i)), dir / ("src/f" + std::to_string(i)));
    }
  }
  CHECK(stat_of(mount, "prefetch.streams.rank0.restarts") == 1);
  CHECK(stat_of(mount, "prefetch.publish_failures") == 0);
  CHECK(stat_of(mount, "prefetch.streams.rank0.epoch") == 0);
  CHECK(stat_of(mount, "prefetch.streams.rank0.this_epoch.opens") == 19);
  CHECK(stat_of(mount, "prefetch.streams.rank0.this_epoch.hits") == 19);
}

TEST_CASE("lookups of missing names leave nothing behind", "[mount][shared]") {
  TempDir dir;
  write_files(dir / "src", 3, 100);
  Mount mount(dir / "src", dir / "mnt", {"--negative-timeout", "0"});
  CHECK(read_file(mount / "f0").has_value());
  const double known = stat_of(mount, "files_known");
  for (int i = 0; i < 2000; ++i) {
    struct stat st;
    CHECK(::stat((mount / ("missing-" + std::to_string(i))).c_str(), &st) != 0);
  }
  CHECK(stat_of(mount, "files_known") == known);
}

}  // namespace
}  // namespace epochfs::test
