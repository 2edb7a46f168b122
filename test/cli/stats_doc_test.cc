// Reading the stats document back (tools/cli/stats_doc.h): dotted keys for nested objects,
// strings unescaped, and anything but the daemon's shape refused.
#include "tools/cli/stats_doc.h"

#include <catch2/catch.hpp>

namespace epochfs::tools {
namespace {

TEST_CASE("the stats document is read as dotted keys", "[stats_doc]") {
  const auto doc = parse_stats(R"({"opens": 12, "hit_rate": 0.5,
    "cache": {"enabled": true, "capacity_bytes": null, "dir": "/nvme/a \"b\""},
    "prefetch": {"streams": {"0/j/s": {"epoch": 3}}}})");
  REQUIRE(doc.has_value());
  CHECK(doc->number("opens") == 12);
  CHECK(doc->number("hit_rate") == 0.5);
  CHECK(doc->values.at("cache.enabled") == "true");
  CHECK(doc->values.at("cache.capacity_bytes") == "null");
  CHECK_FALSE(doc->number("cache.capacity_bytes").has_value());
  CHECK(doc->values.at("cache.dir") == "/nvme/a \"b\"");
  CHECK(doc->number("prefetch.streams.0/j/s.epoch") == 3);
}

TEST_CASE("a truncated or foreign document is refused", "[stats_doc]") {
  CHECK_FALSE(parse_stats(R"({"opens": 12, "cache": {"enabled": tr)").has_value());
  CHECK_FALSE(parse_stats("").has_value());
  CHECK_FALSE(parse_stats("[1, 2]").has_value());
  CHECK_FALSE(parse_stats(R"({"a": [1]})").has_value());
  CHECK(parse_stats("{}").has_value());
}

}  // namespace
}  // namespace epochfs::tools
