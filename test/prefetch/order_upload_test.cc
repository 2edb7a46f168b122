// OrderUpload (prefetch/order_upload.h): an order arriving in writes of any size, front to
// back; one cut short or written out of place publishes nothing and registers nothing.
#include "prefetch/order_upload.h"

#include <errno.h>
#include <unistd.h>

#include <string>

#include <catch2/catch.hpp>

#include "prefetch/blocks.h"

namespace epochfs::prefetch {
namespace {

Publisher me() {
  Publisher p;
  p.uid = ::getuid();
  p.sid = 100;
  p.process = process_of(::getpid());
  p.leader = p.process;
  return p;
}

struct Fixture {
  FileRegistry registry;
  Planner planner{PlannerOptions{}};
  OrderUpload upload{OrderUpload::Kind::kOrder, me(), registry, planner};
};

const std::string kOrder = "#job j\n#stream s\n#epoch 2\n#count 3\na/1\nb/2\nc/3\n";

TEST_CASE("an order written in pieces of any size publishes every entry", "[upload]") {
  for (size_t piece : {size_t{1}, size_t{7}, kOrder.size()}) {
    Fixture f;
    for (size_t at = 0; at < kOrder.size(); at += piece) {
      REQUIRE(f.upload.write(at, std::string_view(kOrder).substr(at, piece)).is_ok());
    }
    const PublishReport& r = f.upload.finish();
    INFO(r.message);
    CHECK(r.ok);
    CHECK(r.accepted == 3);
    CHECK(r.epoch == 2);
    CHECK(f.registry.size() == 3);
    CHECK(f.registry.find("b/2").has_value());
    CHECK(&f.upload.finish() == &r);  // asked again: the same verdict
  }
}

TEST_CASE("an order cut short publishes nothing and registers no path", "[upload]") {
  Fixture f;
  const std::string cut = kOrder.substr(0, kOrder.find("c/3"));
  REQUIRE(f.upload.write(0, cut).is_ok());
  CHECK_FALSE(f.upload.finish().ok);
  CHECK(f.registry.size() == 0);
  CHECK(f.planner.stats().streams.empty());
}

TEST_CASE("a write out of place fails and the upload does not publish", "[upload]") {
  Fixture f;
  REQUIRE(f.upload.write(0, kOrder.substr(0, 10)).is_ok());
  const auto skipped = f.upload.write(20, kOrder.substr(20));
  CHECK(skipped.error_code() == EINVAL);
  CHECK(f.upload.started());
  CHECK_FALSE(f.upload.finish().ok);
  CHECK(f.registry.size() == 0);
}

}  // namespace
}  // namespace epochfs::prefetch

namespace epochfs::prefetch {
namespace {

// An order of n new paths of about 100 bytes each.
std::string long_order(int n) {
  std::string text = "#job big\n";
  for (int i = 0; i < n; ++i) {
    text += std::string(90, 'p') + "/" + std::to_string(i) + "\n";
  }
  return text;
}

TEST_CASE("an upload held open is refused at the write that passes its writer's limit",
          "[upload]") {
  FileRegistry registry;
  Planner planner{PlannerOptions{}};
  UserLedger ledger("bytes of uploads", "--max-upload-memory-per-user", 64 << 10,
                    "--max-upload-memory", 1 << 20);
  const std::string text = long_order(5000);  // ~500 KB of new paths: far past 64 KiB
  int refused_at = -1;
  {
    OrderUpload upload(OrderUpload::Kind::kOrder, me(), registry, planner, &ledger);
    for (size_t at = 0; at < text.size(); at += 4096) {
      auto written = upload.write(at, std::string_view(text).substr(at, 4096));
      if (!written.is_ok()) {
        CHECK(written.error_code() == EDQUOT);
        CHECK_THAT(written.context(), Catch::Contains("--max-upload-memory-per-user 65536"));
        refused_at = static_cast<int>(at);
        break;
      }
      CHECK(ledger.held(::getuid()) <= 64 << 10);
    }
    CHECK(refused_at > 0);
    CHECK(ledger.total() == 0);  // the refused upload let go of what it held
    const PublishReport& r = upload.finish();
    CHECK_FALSE(r.ok);
    CHECK_THAT(r.message, Catch::Contains("--max-upload-memory-per-user"));
  }
  CHECK(registry.size() == 0);
  CHECK(planner.stats().publishes_over_limit == 1);
}

TEST_CASE("an upload's charge is given back when it publishes or goes", "[upload]") {
  FileRegistry registry;
  Planner planner{PlannerOptions{}};
  UserLedger ledger("bytes", "--per-user", 1 << 20, "--all", 2 << 20);
  {
    OrderUpload upload(OrderUpload::Kind::kOrder, me(), registry, planner, &ledger);
    REQUIRE(upload.write(0, long_order(100)).is_ok());
    CHECK(ledger.held(::getuid()) > 0);
    CHECK(upload.finish().ok);
    CHECK(ledger.total() == 0);
  }
  {
    OrderUpload upload(OrderUpload::Kind::kOrder, me(), registry, planner, &ledger);
    REQUIRE(upload.write(0, long_order(100)).is_ok());
  }  // a writer gone without a close
  CHECK(ledger.total() == 0);
}

TEST_CASE("an upload past the per-user entry limit is refused while written", "[upload]") {
  FileRegistry registry;
  Planner planner{PlannerOptions{}};
  OrderUpload upload(OrderUpload::Kind::kOrder, me(), registry, planner, nullptr, 10);
  auto written = upload.write(0, long_order(11));
  CHECK(written.error_code() == EDQUOT);
  CHECK_THAT(written.context(), Catch::Contains("--max-entries-per-user 10"));
  CHECK_FALSE(upload.finish().ok);
  CHECK(registry.size() == 0);
}

TEST_CASE("the paths a user's orders add to the registry stay charged to them", "[upload]") {
  FileRegistry registry;
  Planner planner{PlannerOptions{}};
  UserLedger paths("bytes of paths", "--max-path-memory-per-user", 40 << 10, "--max-path-memory",
                   1 << 20);
  const auto publish = [&](const std::string& text) {
    OrderUpload upload(OrderUpload::Kind::kOrder, me(), registry, planner, nullptr, UINT64_MAX,
                       &paths);
    REQUIRE(upload.write(0, text).is_ok());
    return upload.finish();
  };
  // 100 new paths: charged, and still charged once the order is published and gone.
  const std::string first = long_order(100);
  CHECK(publish(first).ok);
  const uint64_t held = paths.held(::getuid());
  CHECK(held >= 100 * FileRegistry::kBytesPerPath);
  CHECK(registry.size() == 100);
  // The same paths again cost nothing: the registry knows them.
  CHECK(publish(first).ok);
  CHECK(paths.held(::getuid()) == held);
  // An order whose new paths pass the limit is refused whole, and registers none of them.
  std::string more = "#stream other\n";
  for (int i = 0; i < 1000; ++i) {
    more += "other/" + std::to_string(i) + "\n";
  }
  const PublishReport r = publish(more);
  CHECK_FALSE(r.ok);
  CHECK_THAT(r.message, Catch::Contains("--max-path-memory-per-user 40960"));
  CHECK(registry.size() == 100);
  CHECK(paths.held(::getuid()) == held);
}

TEST_CASE("a new path two uploads name at once is charged once, to the one that registered it",
          "[upload]") {
  // The ranks of one job publishing the first epoch's shards together: both find the path
  // new, the first to finish registers it; the second's charge for it goes back.
  FileRegistry registry;
  Planner planner{PlannerOptions{}};
  UserLedger paths("bytes of paths", "--max-path-memory-per-user", 40 << 10, "--max-path-memory",
                   1 << 20);
  const auto upload = [&] {
    return std::make_unique<OrderUpload>(OrderUpload::Kind::kOrder, me(), registry, planner,
                                         nullptr, UINT64_MAX, &paths);
  };
  auto rank0 = upload();
  auto rank1 = upload();
  REQUIRE(rank0->write(0, "#stream rank0\nshared/new\nown/0\n").is_ok());
  REQUIRE(rank1->write(0, "#stream rank1\nshared/new\nown/1\n").is_ok());
  CHECK(rank0->finish().ok);
  CHECK(rank1->finish().ok);
  CHECK(registry.size() == 3);
  CHECK(paths.held(::getuid()) == std::string("shared/new").size() +
                                      2 * std::string("own/0").size() +
                                      3 * FileRegistry::kBytesPerPath);
  // A path repeated within one upload is charged once too.
  const uint64_t before = paths.held(::getuid());
  auto again = upload();
  REQUIRE(again->write(0, "#stream again\ntwice\ntwice\n").is_ok());
  CHECK(again->finish().ok);
  CHECK(registry.size() == 4);
  CHECK(paths.held(::getuid()) ==
        before + std::string("twice").size() + FileRegistry::kBytesPerPath);
}

}  // namespace
}  // namespace epochfs::prefetch

namespace epochfs::prefetch {
namespace {

TEST_CASE("a range order names each block a run of samples falls in, thinned past 16 uses",
          "[upload]") {
  Fixture f;
  // 2,000 samples of 100 bytes, alternating between two blocks of one file, then one sample
  // crossing into a third block.
  std::string text = "#form ranges\n";
  for (int i = 0; i < 2000; ++i) {
    const uint64_t block = i % 2;
    text += std::to_string(block * (1 << 20) + 100 * (i / 2)) + " 100 data.bin\n";
  }
  text += std::to_string(2 * (1 << 20) - 50) + " 100 data.bin\n";
  REQUIRE(f.upload.write(0, text).is_ok());
  const PublishReport& r = f.upload.finish();
  INFO(r.message);
  CHECK(r.ok);
  // Every block a run of samples names, before thinning: the last sample continues the run in
  // block 1, then adds block 2.
  CHECK(r.accepted == 2001);
  CHECK(r.rejects.total == 0);  // a block's uses are not repeats of a file
  // The file and three blocks; 16 uses of each busy block are kept, evenly.
  CHECK(f.registry.size() == 4);
  REQUIRE(f.planner.stats().streams.size() == 1);
  CHECK(f.planner.stats().streams[0].current.length == 16 + 16 + 1);
}

}  // namespace
}  // namespace epochfs::prefetch

namespace epochfs::prefetch {
namespace {

// Publishes a manifest as me(); it must be accepted with `rejects` lines refused.
void publish_manifest(FileRegistry& registry, Planner& planner, const std::string& text,
                      uint64_t rejects) {
  OrderUpload manifest(OrderUpload::Kind::kManifest, me(), registry, planner);
  REQUIRE(manifest.write(0, text).is_ok());
  const PublishReport& r = manifest.finish();
  INFO(r.message);
  REQUIRE(r.ok);
  CHECK(r.rejects.total == rejects);
}

TEST_CASE("an index order over a manifest of ranges names their blocks, a run once", "[upload]") {
  FileRegistry registry;
  Planner planner{PlannerOptions{}};
  // Samples 0 and 1 in block 0, sample 2 in block 1; a bad line keeps its index.
  publish_manifest(
      registry, planner,
      "#job j\n#form ranges\n0 100 d.bin\n100 100 d.bin\nbad line\n1048600 100 d.bin\n", 1);
  OrderUpload order(OrderUpload::Kind::kOrder, me(), registry, planner);
  REQUIRE(order.write(0, "#job j\n#form indices\n0\n1\n3\n1\n2\n").is_ok());
  const PublishReport& r = order.finish();
  INFO(r.message);
  CHECK(r.ok);
  CHECK(r.accepted == 3);       // block 0 (samples 0, 1), block 1, block 0 again
  CHECK(r.rejects.total == 1);  // index 2: the bad manifest line
  REQUIRE(planner.stats().streams.size() == 1);
  CHECK(planner.stats().streams[0].current.length == 3);
  // The publisher reads the file by blocks now, another user does not.
  const FileId file = *registry.find("d.bin");
  CHECK(planner.reads_by_blocks(file, me().uid));
  CHECK_FALSE(planner.reads_by_blocks(file, me().uid + 1));
}

}  // namespace
}  // namespace epochfs::prefetch

namespace epochfs::prefetch {
namespace {

TEST_CASE("an index order stages every block a manifest's range crosses", "[upload]") {
  FileRegistry registry;
  Planner planner{PlannerOptions{}};
  // Line 0: 2 MiB from 10 bytes before block 1, so blocks 0, 1 and 2; line 1 in block 2.
  publish_manifest(registry, planner,
                   "#job j\n#form ranges\n1048566 2097152 d.bin\n2097200 100 d.bin\n", 0);
  // The manifest registers first blocks only, and holds its span as two entries.
  CHECK(registry.find(block_key("d.bin", 0)));
  CHECK_FALSE(registry.find(block_key("d.bin", 1)));
  CHECK(planner.stats().manifest_entries == 2 + 2);
  OrderUpload order(OrderUpload::Kind::kOrder, me(), registry, planner);
  REQUIRE(order.write(0, "#job j\n#form indices\n0\n1\n").is_ok());
  const PublishReport& r = order.finish();
  INFO(r.message);
  CHECK(r.ok);
  // Blocks 0, 1, 2 for line 0; line 1 continues the run in block 2.
  REQUIRE(planner.stats().streams.size() == 1);
  CHECK(planner.stats().streams[0].current.length == 3);
  const auto b1 = registry.find(block_key("d.bin", 1));
  REQUIRE(b1);
  CHECK(planner.order_holds(*b1));
}

}  // namespace
}  // namespace epochfs::prefetch
