// OrderUpload (prefetch/order_upload.h): an order arriving in writes of any size, front to
// back; one cut short or written out of place publishes nothing and registers nothing.
#include "prefetch/order_upload.h"

#include <errno.h>
#include <unistd.h>

#include <string>

#include <catch2/catch.hpp>

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
