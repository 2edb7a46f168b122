// The benchmark harness itself (`epochfs bench`): a tiny run of every scenario must generate
// the dataset as specified, finish every epoch, write every JSON field, and report hit rates
// that agree with the bytes read from the shared storage. No speed is asserted.
#include <filesystem>
#include <string>

#include <catch2/catch.hpp>

#include "test/mount/mount_fixture.h"
#include "tools/stats_doc.h"

namespace epochfs::test {

namespace fs = std::filesystem;

TEST_CASE("epochfs bench runs every scenario and reports consistent figures", "[mount][bench]") {
  TempDir dir;
  const std::string json = dir / "out.json";
  auto r = run_epochfs({"bench", "--dir", dir / "work", "--files", "60", "--mean-kb", "20",
                        "--epochs", "2", "--batch", "8", "--workers", "2", "--compute-ms", "1",
                        "--latency-ms", "1", "--json", json});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);

  size_t files = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir / "work/data")) {
    files += e.is_regular_file() ? 1 : 0;
  }
  CHECK(files >= 60);  // the dataset's files (and its spec stamp)

  auto text = read_file(json);
  REQUIRE(text.has_value());
  auto doc = tools::parse_stats(*text);
  REQUIRE(doc.has_value());
  const auto num = [&](const std::string& key) {
    INFO(key);
    auto v = doc->number(key);
    REQUIRE(v.has_value());
    return *v;
  };
  CHECK(num("config.files") == 60);
  for (const std::string scenario : {"ideal", "direct", "lru", "copy", "epochfs"}) {
    for (const std::string epoch : {"1", "2"}) {
      const std::string at = "results." + scenario + "." + epoch + ".";
      INFO(at);
      CHECK(num(at + "samples") == 60);
      CHECK(num(at + "errors") == 0);
      CHECK(num(at + "samples_per_s") > 0);
      CHECK(num(at + "stall_fraction") >= 0);
      CHECK(num(at + "p99_wait_ms") >= num(at + "p50_wait_ms"));
      CHECK(num(at + "ratio_to_ideal") > 0);
      CHECK(doc->values.count(at + "hit_rate") == 1);
    }
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
}

}  // namespace epochfs::test
