// The benchmark harness itself (`epochfs-lab bench`): a tiny run of every scenario must generate
// the dataset as specified, finish every epoch, write every JSON field, and report hit rates
// that agree with the bytes read from the shared storage. No speed is asserted.
#include <filesystem>
#include <string>

#include <catch2/catch.hpp>

#include "test/mount/mount_fixture.h"
#include "tools/cli/stats_doc.h"

namespace epochfs::test {

namespace fs = std::filesystem;

namespace {

// The JSON document `epochfs-lab bench --json` wrote, or a failed check.
tools::StatsDoc read_json(const std::string& path) {
  auto text = read_file(path);
  REQUIRE(text.has_value());
  auto doc = tools::parse_stats(*text);
  REQUIRE(doc.has_value());
  return *doc;
}

double number(const tools::StatsDoc& doc, const std::string& key) {
  INFO(key);
  auto v = doc.number(key);
  REQUIRE(v.has_value());
  return *v;
}

size_t count_files(const fs::path& dir) {
  size_t files = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    files += e.is_regular_file() ? 1 : 0;
  }
  return files;
}

}  // namespace

TEST_CASE("epochfs-lab bench runs every scenario and reports consistent figures",
          "[mount][bench]") {
  TempDir dir;
  const std::string json = dir / "out.json";
  const std::string png = dir / "out.png";
  auto r = run_lab({"bench", "--dir",        dir / "work", "--files",      "60", "--mean-kb",
                    "20",    "--epochs",     "2",          "--batch",      "8",  "--workers",
                    "2",     "--compute-ms", "1",          "--latency-ms", "1",  "--cache-fraction",
                    "1,0.5", "--json",       json,         "--plot",       png});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(count_files(dir / "work/data") >= 60);  // the dataset's files (and its spec stamp)

  const auto doc = read_json(json);
  const auto num = [&](const std::string& key) { return number(doc, key); };
  CHECK(num("config.files") == 60);
  CHECK(num("storage.latency_ms") == 1);
  CHECK(num("storage.max_inflight") == 64);  // the default preset's, not overridden
  CHECK(num("storage.per_file_ms") >= 2);    // an open and a read, 1 ms each
  CHECK(num("storage.files_per_s_64") > 0);
  CHECK(num("storage.cpu_us_per_file") > 0);
  for (const std::string run :
       {"ideal", "direct", "lru", "lru-50%", "copy", "epochfs", "epochfs-50%"}) {
    for (const std::string epoch : {"1", "2"}) {
      const std::string at = "results." + run + "." + epoch + ".";
      INFO(at);
      CHECK(num(at + "samples") == 60);
      CHECK(num(at + "errors") == 0);
      CHECK(num(at + "samples_per_s") > 0);
      CHECK(num(at + "stall_fraction") >= 0);
      CHECK(num(at + "p99_wait_ms") >= num(at + "p50_wait_ms"));
      CHECK(num(at + "ratio_to_ideal") > 0);
      CHECK(doc.values.count(at + "hit_rate") == 1);
    }
  }
  CHECK(num("results.lru-50%.1.cache_fraction") == 0.5);
  for (const std::string ratio :
       {"epochfs/ideal", "epochfs/direct", "epochfs/lru", "epochfs/copy", "epochfs-50%/lru-50%"}) {
    CHECK(num("summary." + ratio) > 0);
  }

  const auto source = [&](const std::string& s, const std::string& e) {
    return num("results." + s + "." + e + ".source_bytes");
  };
  const double dataset = num("results.direct.1.bytes_read");
  CHECK(source("ideal", "1") == 0);
  CHECK(source("direct", "1") == dataset);
  // An LRU cache that starts empty misses everything once, then (the dataset fits) nothing.
  // Copies still running when an epoch ends count in the next one's source bytes.
  CHECK(num("results.lru.1.hit_rate") == 0);
  CHECK(source("lru", "1") + source("lru", "2") >= 2 * dataset);
  CHECK(num("results.lru.2.hit_rate") == 1);
  CHECK(source("lru", "2") < dataset / 2);
  CHECK(source("copy", "1") >= dataset);
  CHECK(num("results.copy.1.staging_s") > 0);
  CHECK(source("copy", "2") == 0);
  // epochfs copies each file once: the first epoch reads the dataset, the second (almost)
  // nothing.
  CHECK(source("epochfs", "1") + source("epochfs", "2") >= dataset);
  CHECK(num("results.epochfs.2.hit_rate") == 1);
  CHECK(source("epochfs", "2") < dataset / 2);
  // A cache of half the dataset carries at most about half of it into epoch 2 (blocks
  // rounding lets it hold a little more): the rest comes from the source again.
  for (const std::string run : {"lru-50%", "epochfs-50%"}) {
    INFO(run);
    CHECK(source(run, "1") + source(run, "2") >= 1.4 * dataset);
  }
  CHECK(num("results.lru-50%.2.hit_rate") < 1);

  auto plot = read_file(png);
  REQUIRE(plot.has_value());
  CHECK(plot->substr(0, 4) == "\x89PNG");
}

// A real network filesystem as the source: GlusterFS in a network namespace over a veth
// pair (test/fixtures/gluster/). The bench sets it up, runs, and leaves nothing behind.
TEST_CASE("epochfs-lab bench runs over GlusterFS and tears it down", "[mount][bench][gluster]") {
  TempDir dir;
  const std::string json = dir / "out.json";
  auto r = run_lab({"bench",
                    "--source",
                    "gluster",
                    "--bandwidth-mbs",
                    "100",
                    "--dir",
                    dir / "work",
                    "--files",
                    "40",
                    "--mean-kb",
                    "20",
                    "--epochs",
                    "2",
                    "--batch",
                    "8",
                    "--workers",
                    "2",
                    "--compute-ms",
                    "1",
                    "--scenarios",
                    "ideal,direct,epochfs",
                    "--cache-fraction",
                    "1",
                    "--json",
                    json});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto doc = read_json(json);
  CHECK(number(doc, "results.direct.1.samples") == 40);
  CHECK(number(doc, "results.direct.1.errors") == 0);
  CHECK(number(doc, "results.epochfs.2.hit_rate") == 1);
  CHECK(number(doc, "storage.per_file_ms") > 0);
  // Torn down: no GlusterFS mount, and the brick (the dataset) holds only its own files.
  auto mounts = read_file("/proc/mounts");
  REQUIRE(mounts.has_value());
  CHECK(mounts->find("fuse.glusterfs") == std::string::npos);
  CHECK_FALSE(fs::exists(dir / "work/data/.glusterfs"));
}

}  // namespace epochfs::test

namespace epochfs::test {

TEST_CASE("epochfs-lab demo compares the mount with direct reads, and with a peer when it mounts",
          "[mount][bench]") {
  TempDir dir;
  // bindfs is optional (README): with it the table gains its columns, without it the demo
  // says it was left out and measures the rest.
  const bool has_bindfs = run_command({"sh", "-c", "command -v bindfs"}).exit_code == 0;
  const auto r =
      run_lab({"demo", "--dir", dir / "demo", "--files", "60", "--mean-kb", "20", "--threads", "2",
               "--rounds", "1", "--cold", "--cold-pages", "--peer", "bindfs"});
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("mean 20 KB") != std::string::npos);
  CHECK(r.output.find("first read, cache empty") != std::string::npos);
  CHECK(r.output.find("cold page cache, dentries and inodes kept") != std::string::npos);
  CHECK((r.output.find("bindfs files/s") != std::string::npos) == has_bindfs);
  CHECK((r.output.find("bindfs did not mount; left out") != std::string::npos) == !has_bindfs);
  CHECK_FALSE(is_mounted(dir / "demo/peer-bindfs"));
  CHECK_FALSE(is_mounted(dir / "demo/mnt"));
}

}  // namespace epochfs::test
