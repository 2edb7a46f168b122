// libFuzzer target for the shuffle-file parser: any bytes, fed in chunks split where the input
// says, must neither crash nor break the parser's promises (every accepted entry is a
// normalised relative path of valid UTF-8 without NUL, an index that parses, or a range that
// parses with such a path).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "prefetch/blocks.h"
#include "prefetch/order_parser.h"

namespace {

using epochfs::prefetch::OrderForm;
using epochfs::prefetch::OrderParser;
using epochfs::prefetch::RejectReport;

void check_path(std::string_view entry);

void check_entry(std::string_view entry, OrderForm form) {
  if (form == OrderForm::kIndices) {
    if (!epochfs::prefetch::parse_index(entry)) {
      abort();
    }
    return;
  }
  if (form == OrderForm::kRanges) {
    const char* why = "";
    auto range = epochfs::prefetch::parse_range(entry, &why);
    if (!range) {
      abort();
    }
    check_path(range->path);
    return;
  }
  check_path(entry);
}

void check_path(std::string_view entry) {
  const bool bad = entry.empty() || entry.size() > epochfs::prefetch::kMaxLineBytes ||
                   entry.front() == '/' || entry.find('\0') != std::string_view::npos ||
                   !epochfs::prefetch::valid_utf8(entry) || entry == ".." ||
                   entry.substr(0, 3) == "../" || entry.find("/../") != std::string_view::npos ||
                   entry.find("//") != std::string_view::npos || entry == "." ||
                   entry.substr(0, 2) == "./" || entry.find("/./") != std::string_view::npos ||
                   (entry.size() >= 3 && entry.substr(entry.size() - 3) == "/..");
  if (bad) {
    abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) {
    return 0;
  }
  // The first byte picks the chunk size, so line ends fall across feed() calls too.
  const size_t chunk = 1 + data[0] % 64;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  RejectReport rejects;
  OrderParser* self = nullptr;
  OrderParser parser([&](std::string_view entry, uint64_t) { check_entry(entry, self->form()); },
                     &rejects);
  self = &parser;
  for (size_t at = 0; at < input.size(); at += chunk) {
    parser.feed(input.substr(at, chunk));
  }
  (void)parser.finish();
  if (rejects.examples.size() > RejectReport::kExamples) {
    abort();
  }
  return 0;
}
