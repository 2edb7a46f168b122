#include "prefetch/order_parser.h"

#include <errno.h>

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

namespace epochfs::prefetch {
namespace {

using namespace std::string_literals;

// Everything a parse produced, so that two parses of the same bytes can be compared whole.
struct Parsed {
  std::vector<std::pair<std::string, uint64_t>> entries;  // entry, line
  RejectReport rejects;
  OrderHeader header;
  OrderForm form = OrderForm::kPaths;
  uint64_t entry_lines = 0;
  int finish_errno = 0;
  std::string finish_context;

  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& e : entries) {
      out.push_back(e.first);
    }
    return out;
  }

  std::vector<uint64_t> lines() const {
    std::vector<uint64_t> out;
    for (const auto& e : entries) {
      out.push_back(e.second);
    }
    return out;
  }

  bool ok() const { return finish_errno == 0; }
};

bool same_header(const OrderHeader& a, const OrderHeader& b) {
  return a.form == b.form && a.epoch == b.epoch && a.stream == b.stream && a.count == b.count;
}

bool no_header(const OrderHeader& h) { return same_header(h, OrderHeader{}); }

bool same(const Parsed& a, const Parsed& b) {
  return a.entries == b.entries && a.rejects.total == b.rejects.total &&
         a.rejects.examples == b.rejects.examples && same_header(a.header, b.header) &&
         a.form == b.form && a.entry_lines == b.entry_lines && a.finish_errno == b.finish_errno &&
         a.finish_context == b.finish_context;
}

// Parses input fed as the given chunks (byte counts; the rest goes in one last chunk).
Parsed parse_chunks(std::string_view input, const std::vector<size_t>& chunks,
                    OrderForm default_form = OrderForm::kPaths) {
  Parsed out;
  OrderParser parser(
      [&](std::string_view entry, uint64_t line) { out.entries.emplace_back(entry, line); },
      &out.rejects, default_form);
  size_t at = 0;
  for (size_t n : chunks) {
    n = std::min(n, input.size() - at);
    parser.feed(input.substr(at, n));
    at += n;
  }
  parser.feed(input.substr(at));
  const cachestore::Status st = parser.finish();
  out.finish_errno = st.error_code();
  out.finish_context = st.context();
  out.header = parser.header();
  out.form = parser.form();
  out.entry_lines = parser.entry_lines();
  return out;
}

Parsed parse(std::string_view input, OrderForm default_form = OrderForm::kPaths) {
  return parse_chunks(input, {}, default_form);
}

Parsed parse_bytewise(std::string_view input, OrderForm default_form = OrderForm::kPaths) {
  return parse_chunks(input, std::vector<size_t>(input.size(), 1), default_form);
}

// Random chunk sizes, mostly small, sometimes zero, sometimes large.
Parsed parse_random_split(std::string_view input, uint32_t seed,
                          OrderForm default_form = OrderForm::kPaths) {
  std::mt19937 rng(seed);
  std::vector<size_t> chunks;
  size_t total = 0;
  while (total < input.size()) {
    const uint32_t kind = rng() % 10;
    const size_t n = kind == 0 ? 0 : kind < 8 ? 1 + rng() % 8 : 1 + rng() % 5000;
    chunks.push_back(n);
    total += n;
  }
  return parse_chunks(input, chunks, default_form);
}

using Names = std::vector<std::string>;

}  // namespace

TEST_CASE("order lines end with LF or CRLF, and a last line without a newline counts",
          "[order_parser]") {
  auto p = parse("a\nb\r\nc/d\r\ne");
  CHECK(p.names() == Names{"a", "b", "c/d", "e"});
  CHECK(p.lines() == std::vector<uint64_t>{1, 2, 3, 4});
  CHECK(p.rejects.total == 0);
  CHECK(p.entry_lines == 4);
  CHECK(p.ok());

  // Only the CR right before the LF is a line ending; CRLF blank lines count as lines.
  p = parse("a\r\n\r\nb\r\r\nc\r");
  CHECK(p.names() == Names{"a", "b\r", "c"});
  CHECK(p.lines() == std::vector<uint64_t>{1, 3, 4});

  // A CR elsewhere is part of the name.
  p = parse("x\ry\n");
  CHECK(p.names() == Names{"x\ry"});

  // The last line alone, without any newline.
  p = parse("only");
  CHECK(p.names() == Names{"only"});
  CHECK(p.lines() == std::vector<uint64_t>{1});
  CHECK(p.ok());
}

TEST_CASE("comments and blank lines are skipped but keep the line numbers", "[order_parser]") {
  const auto p = parse(
      "# a comment\n"
      "\n"
      "   \n"
      "\t \r\n"
      "foo\n"
      "#another comment\n"
      "#epochs to come\n"  // starts with a keyword but is no directive
      "#ending\n"
      "#Count 5\n"  // keywords are lower case: a comment
      "#\n"
      "bar\n"
      " #not a comment\n");  // only a '#' in the first column starts a comment
  CHECK(p.names() == Names{"foo", "bar", " #not a comment"});
  CHECK(p.lines() == std::vector<uint64_t>{5, 11, 12});
  CHECK(p.rejects.total == 0);
  CHECK(p.entry_lines == 3);
  CHECK(no_header(p.header));
  CHECK(p.ok());
}

// epochfs publish and the Python client write their own header lines ahead of a user's file:
// #line 1 after them keeps the line numbers of the reports the file's own.
TEST_CASE("#line numbers the lines that follow as the file's own", "[order_parser]") {
  auto p = parse("#epoch 3\n#stream r0\n#line 1\nfoo\n/abs\nbar\n");
  CHECK(p.names() == Names{"foo", "bar"});
  CHECK(p.lines() == std::vector<uint64_t>{1, 3});
  REQUIRE(p.rejects.examples.size() == 1);
  CHECK(p.rejects.examples[0].rfind("line 2: ", 0) == 0);
  CHECK(p.header.epoch == 3u);

  // A bad value is reported and changes nothing; after the entries began, a #line is a comment.
  p = parse("#line 0\n#line x\nfoo\n#line 100\n/abs\n");
  CHECK(p.lines() == std::vector<uint64_t>{3});
  REQUIRE(p.rejects.examples.size() == 3);
  CHECK(p.rejects.examples[0] == "line 1: bad #line directive (ignored): #line 0");
  CHECK(p.rejects.examples[2].rfind("line 5: ", 0) == 0);
}

TEST_CASE("header directives set the form, epoch, stream and count", "[order_parser]") {
  auto p = parse(
      "#form indices\n"
      "#epoch 7\n"
      "#stream rank-0.main_A\n"
      "#count 3\n"
      "1\n"
      "2\n"
      "3\n");
  CHECK(p.header.form == OrderForm::kIndices);
  CHECK(p.form == OrderForm::kIndices);
  CHECK(p.header.epoch == uint64_t{7});
  CHECK(p.header.stream == "rank-0.main_A"s);
  CHECK(p.header.count == uint64_t{3});
  CHECK(p.names() == Names{"1", "2", "3"});
  CHECK(p.lines() == std::vector<uint64_t>{5, 6, 7});
  CHECK(p.rejects.total == 0);
  CHECK(p.ok());

  SECTION("`# key: value`, `#key=value`, `#key:value`, tabs and CRLF are the same") {
    for (const char* text : {
             "# count: 2\n# epoch: 9\n# form: paths\n# stream: s1\na\nb\n",
             "#count=2\n#epoch=9\n#form=paths\n#stream=s1\na\nb\n",
             "#count:2\n#epoch:9\n#form:path\n#stream:s1\na\nb\n",
             "#count\t2\r\n#  epoch   9  \r\n#form\tpaths\r\n#stream s1\r\na\r\nb\r\n",
             "#count= 2\n#epoch= 9\n#form:   paths\n#stream=  s1 \na\nb",
         }) {
      INFO(escape_for_log(text, 200));
      p = parse(text);
      CHECK(p.header.count == uint64_t{2});
      CHECK(p.header.epoch == uint64_t{9});
      CHECK(p.header.form == OrderForm::kPaths);
      CHECK(p.header.stream == "s1"s);
      CHECK(p.names() == Names{"a", "b"});
      CHECK(p.rejects.total == 0);
      CHECK(p.ok());
    }
  }

  SECTION("`#form index` is the indices form, and the constructor sets the default") {
    p = parse("#form index\n5\n");
    CHECK(p.form == OrderForm::kIndices);
    p = parse("5\n", OrderForm::kIndices);
    CHECK_FALSE(p.header.form.has_value());
    CHECK(p.form == OrderForm::kIndices);
    CHECK(p.names() == Names{"5"});
    p = parse("#form paths\n5\n", OrderForm::kIndices);
    CHECK(p.form == OrderForm::kPaths);
    CHECK(p.names() == Names{"5"});
  }
}

TEST_CASE("range entries are OFFSET LENGTH PATH, their paths normalised", "[order_parser]") {
  const Parsed p = parse(
      "#form ranges\n0 4096 data/./x.bin\n1048570 12  a b.h5\n\t7\t1\tlast\n"
      "-1 4 x\n4 0 x\n4 4\n4 4 /abs\n4 4 ../up\n99999999999999999999 4 x\n");
  CHECK(p.form == OrderForm::kRanges);
  CHECK(p.names() ==
        std::vector<std::string>{"0 4096 data/x.bin", "1048570 12 a b.h5", "7 1 last"});
  CHECK(p.rejects.total == 6);
  CHECK(p.entry_lines == 9);
}

TEST_CASE("a range path that starts with a blank once normalised is refused", "[order_parser]") {
  // The fuzzer's find: "\t\t\t/etc" would read back, past the range's blanks, as "/etc".
  const Parsed p = parse("#form ranges\n7 20 .///\t\t\t/etc\n7 20 ./ x\n7 20 d/ x\n");
  CHECK(p.names() == std::vector<std::string>{"7 20 d/ x"});
  CHECK(p.rejects.total == 2);
  REQUIRE(p.rejects.examples.size() == 2);
  CHECK_THAT(p.rejects.examples[0], Catch::Contains("range path starts with a blank"));
}

TEST_CASE("#restart before the entries asks for a restart of the stream", "[order_parser]") {
  CHECK_FALSE(parse("#epoch 3\na\n").header.restart);
  CHECK(parse("#epoch 3\n#restart\na\n").header.restart);
  CHECK_FALSE(parse("a\n#restart\nb\n").header.restart);  // after the entries: a comment
  CHECK_FALSE(parse("#restarting soon\na\n").header.restart);
}

TEST_CASE("the first of each directive wins and repeats are ignored", "[order_parser]") {
  const auto p = parse(
      "#epoch 1\n"
      "#epoch 2\n"
      "#count 2\n"
      "#count=5\n"
      "#stream a\n"
      "#stream b\n"
      "#form paths\n"
      "#form indices\n"
      "x\n"
      "y\n");
  CHECK(p.header.epoch == uint64_t{1});
  CHECK(p.header.count == uint64_t{2});
  CHECK(p.header.stream == "a"s);
  CHECK(p.header.form == OrderForm::kPaths);
  CHECK(p.names() == Names{"x", "y"});
  // Not reported: `epochfs publish --epoch N` overrides a file's own #epoch this way.
  CHECK(p.rejects.total == 0);
  CHECK(p.entry_lines == 2);
  CHECK(p.ok());  // the first #count (2) is the one checked
}

TEST_CASE("bad directive values are reported and ignored", "[order_parser]") {
  struct Case {
    const char* line;
    const char* reason;
  };

  const std::string long_id(65, 's');
  const std::string max_id(64, 's');
  for (const Case& c : {
           Case{"#epoch -1", "bad #epoch directive (ignored)"},
           Case{"#epoch +1", "bad #epoch directive (ignored)"},
           Case{"#epoch x", "bad #epoch directive (ignored)"},
           Case{"#epoch 1 2", "bad #epoch directive (ignored)"},
           Case{"#epoch 18446744073709551616", "bad #epoch directive (ignored)"},
           Case{"#epoch", "bad #epoch directive (ignored)"},
           Case{"#count 1e3", "bad #count directive (ignored)"},
           Case{"#count 0x10", "bad #count directive (ignored)"},
           Case{"#count = 3", "bad #count directive (ignored)"},
           Case{"#form sideways", "bad #form directive (ignored)"},
           Case{"#form", "bad #form directive (ignored)"},
           Case{"#form PATHS", "bad #form directive (ignored)"},
           Case{"#stream", "bad #stream directive (ignored)"},
           Case{"#stream two words", "bad #stream directive (ignored)"},
           Case{"#stream a/b", "bad #stream directive (ignored)"},
           Case{"#stream caf\xc3\xa9", "bad #stream directive (ignored)"},
       }) {
    INFO(c.line);
    const auto p = parse(std::string(c.line) + "\nentry\n");
    CHECK(no_header(p.header));
    CHECK(p.names() == Names{"entry"});
    CHECK(p.rejects.total == 1);
    REQUIRE(p.rejects.examples.size() == 1);
    CHECK(p.rejects.examples[0] ==
          "line 1: " + std::string(c.reason) + ": " + escape_for_log(c.line));
    CHECK(p.ok());
  }
  // Stream ids: 64 bytes of [A-Za-z0-9._-] at most.
  auto p = parse("#stream " + long_id + "\na\n");
  CHECK_FALSE(p.header.stream.has_value());
  CHECK(p.rejects.total == 1);
  p = parse("#stream " + max_id + "\na\n");
  CHECK(p.header.stream == max_id);
  CHECK(p.rejects.total == 0);
  // The largest epoch parses.
  p = parse("#epoch 18446744073709551615\na\n");
  CHECK(p.header.epoch == UINT64_MAX);
  // A bad directive does not count as the first one: a later good one is taken.
  p = parse("#epoch x\n#epoch 4\n#count\n#count 1\na\n");
  CHECK(p.header.epoch == uint64_t{4});
  CHECK(p.header.count == uint64_t{1});
  CHECK(p.rejects.total == 2);
  CHECK(p.ok());
}

TEST_CASE("directives after the first entry line are comments", "[order_parser]") {
  auto p = parse("a\n#count 5\n#epoch 3\n#stream late\n#form indices\n12\nb\n");
  CHECK(no_header(p.header));
  CHECK(p.form == OrderForm::kPaths);
  CHECK(p.names() == Names{"a", "12", "b"});
  CHECK(p.rejects.total == 0);
  CHECK(p.ok());  // the late #count 5 is not checked
  // A rejected entry line also ends the header.
  p = parse("/abs\n#count 1\nb\n");
  CHECK_FALSE(p.header.count.has_value());
  CHECK(p.names() == Names{"b"});
  CHECK(p.rejects.total == 1);
  CHECK(p.entry_lines == 2);
  CHECK(p.ok());
}

TEST_CASE("lines after #end are rejected", "[order_parser]") {
  auto p = parse("#count 2\na\nb\n#end\n");
  CHECK(p.names() == Names{"a", "b"});
  CHECK(p.rejects.total == 0);
  CHECK(p.ok());

  p = parse("a\n#end\njunk\n\n   \n# comment\n#end\nc");
  CHECK(p.names() == Names{"a"});
  CHECK(p.entry_lines == 1);
  CHECK(p.rejects.total == 4);  // blank lines after #end are still blank
  REQUIRE(p.rejects.examples.size() == 4);
  CHECK(p.rejects.examples[0] == "line 3: after the #end line: junk");
  CHECK(p.rejects.examples[1] == "line 6: after the #end line: # comment");
  CHECK(p.rejects.examples[2] == "line 7: after the #end line: #end");
  CHECK(p.rejects.examples[3] == "line 8: after the #end line: c");
  CHECK(p.ok());

  // Spellings of the end marker, and lines that only look like it.
  for (const char* end : {"#end", "# end", "#end  ", "#end\r", "#  end\t", "#end:", "#end="}) {
    INFO(escape_for_log(end));
    p = parse("a\n"s + end + "\nb\n");
    CHECK(p.names() == Names{"a"});
    CHECK(p.rejects.total == 1);
  }
  for (const char* not_end : {"#end now", "#ended", "#endx", "#END", "#end: 1"}) {
    INFO(not_end);
    p = parse("a\n"s + not_end + "\nb\n");
    CHECK(p.names() == Names{"a", "b"});
    CHECK(p.rejects.total == 0);
  }

  // Lines after #end are not entry lines for #count.
  p = parse("#count 2\na\nb\n#end\nc\nd\n");
  CHECK(p.names() == Names{"a", "b"});
  CHECK(p.entry_lines == 2);
  CHECK(p.rejects.total == 2);
  CHECK(p.ok());

  // #end before any entry: nothing is left to publish.
  p = parse("#end\na\n");
  CHECK(p.names().empty());
  CHECK(p.rejects.total == 1);
  CHECK(p.finish_errno == EINVAL);
}

TEST_CASE("a #count that does not match the entry lines fails finish()", "[order_parser]") {
  // Cut short: fewer entry lines than announced.
  auto p = parse("#count 3\na\nb\n");
  CHECK(p.names() == Names{"a", "b"});
  CHECK(p.finish_errno == EINVAL);
  CHECK(p.finish_context.find("#count says 3") != std::string::npos);
  CHECK(p.finish_context.find("has 2") != std::string::npos);
  // More lines than announced.
  p = parse("#count 1\na\nb\n");
  CHECK(p.finish_errno == EINVAL);
  // Exactly as announced, with bad entries and over-long lines counted as entry lines but
  // comments, blanks and directives not.
  p = parse("#count 4\n#x\na\n\n/abs\n" + std::string(5000, 'z') + "\nb\n");
  CHECK(p.names() == Names{"a", "b"});
  CHECK(p.rejects.total == 2);
  CHECK(p.entry_lines == 4);
  CHECK(p.ok());
  // Cutting the file anywhere before its last entry line fails.
  const std::string full = "#count 3\nalpha\nbeta\ngamma\n";
  const size_t last_line = full.find("gamma");
  for (size_t n = 0; n < last_line; ++n) {
    INFO("cut at " << n);
    CHECK(parse(full.substr(0, n)).finish_errno == EINVAL);
  }
  CHECK(parse(full).ok());
  // #count 0 with no entries: the count matches but there is nothing to publish.
  p = parse("#count 0\n");
  CHECK(p.finish_errno == EINVAL);
  CHECK(p.finish_context.find("no entries") != std::string::npos);
}

TEST_CASE("a plain list is accepted and an input without entries is not", "[order_parser]") {
  auto p = parse("a\nb\n");
  CHECK(no_header(p.header));
  CHECK(p.ok());
  for (const char* empty :
       {"", "\n", "\n\n\r\n", "   \t\n", "# only a comment\n", "#form paths\n#epoch 1\n"}) {
    INFO(escape_for_log(empty));
    p = parse(empty);
    CHECK(p.names().empty());
    CHECK(p.entry_lines == 0);
    CHECK(p.finish_errno == EINVAL);
    CHECK(p.finish_context.find("no entries") != std::string::npos);
  }
  // Entry lines that were all rejected still count as entries for finish(); the upload refuses
  // an order with no usable entry on its own.
  p = parse("/abs\n");
  CHECK(p.names().empty());
  CHECK(p.entry_lines == 1);
  CHECK(p.ok());
}

TEST_CASE("lines longer than 4096 bytes are rejected and parsing continues", "[order_parser]") {
  const std::string max_line(kMaxLineBytes, 'a');
  const std::string long_line(kMaxLineBytes + 1, 'b');
  auto p = parse(max_line + "\n" + long_line + "\nnext\n");
  CHECK(p.names() == Names{max_line, "next"});
  CHECK(p.lines() == std::vector<uint64_t>{1, 3});
  CHECK(p.entry_lines == 3);
  REQUIRE(p.rejects.total == 1);
  CHECK(p.rejects.examples[0] ==
        "line 2: line longer than 4096 bytes: " + std::string(80, 'b') + "...");

  // The CR of a CRLF does not count towards the limit.
  p = parse(max_line + "\r\n" + long_line + "\r\nnext\r\n");
  CHECK(p.names() == Names{max_line, "next"});
  CHECK(p.rejects.total == 1);

  // A huge line (1 MiB), fed in pieces, and one at the very end without a newline.
  const std::string huge(1 << 20, 'h');
  p = parse_random_split("a\n" + huge + "\nb\n" + huge, 7);
  CHECK(p.names() == Names{"a", "b"});
  CHECK(p.lines() == std::vector<uint64_t>{1, 3});
  CHECK(p.rejects.total == 2);
  CHECK(p.entry_lines == 4);

  // A long path of many components at exactly the limit is fine.
  std::string deep;
  while (deep.size() + 4 <= kMaxLineBytes) {
    deep += "d/";
  }
  deep += "ff";
  REQUIRE(deep.size() == kMaxLineBytes);
  p = parse(deep + "\n");
  CHECK(p.names() == Names{deep});

  // An over-long comment is still a comment (not an entry line).
  p = parse("#" + std::string(10000, 'c') + "\nx\n");
  CHECK(p.names() == Names{"x"});
  CHECK(p.rejects.total == 0);
  CHECK(p.entry_lines == 1);
}

TEST_CASE("entries with NUL bytes are rejected", "[order_parser]") {
  const auto p = parse("a\0b\n\0\nok\nend\0\n#comment\0\n"s);
  CHECK(p.names() == Names{"ok"});
  CHECK(p.entry_lines == 4);
  CHECK(p.rejects.total == 3);
  REQUIRE(p.rejects.examples.size() == 3);
  CHECK(p.rejects.examples[0] == "line 1: contains a NUL byte: a\\x00b");
  CHECK(p.rejects.examples[1] == "line 2: contains a NUL byte: \\x00");
  CHECK(p.rejects.examples[2] == "line 4: contains a NUL byte: end\\x00");
  const auto q = parse("#form indices\n1\0\n2\n"s);
  CHECK(q.names() == Names{"2"});
  CHECK(q.rejects.total == 1);
}

TEST_CASE("entries that are not valid UTF-8 are rejected", "[order_parser]") {
  const std::vector<std::string> bad = {
      "\xc0\xaf",                  // overlong '/'
      "\xc1\xbf",                  // overlong, 2 bytes
      "\xe0\x80\xaf",              // overlong '/', 3 bytes
      "\xe0\x9f\xbf",              // overlong U+07FF
      "\xf0\x80\x80\xaf",          // overlong '/', 4 bytes
      "\xf0\x8f\xbf\xbf",          // overlong U+FFFF
      "\xed\xa0\x80",              // U+D800, a surrogate
      "\xed\xbf\xbf",              // U+DFFF
      "\xed\xa0\xbd\xed\xb8\x80",  // a CESU-8 surrogate pair
      "\xe2\x82",                  // truncated 3-byte sequence
      "\xf0\x9f\x98",              // truncated 4-byte sequence
      "\xc3",                      // truncated 2-byte sequence
      "a\xc3",                     // truncated at the end
      "\xc3"
      "a",                         // bad continuation byte
      "\xe2\x28\xa1",              // bad second byte
      "\xf4\x90\x80\x80",          // U+110000
      "\xf5\x80\x80\x80",          // lead byte past U+10FFFF
      "\xf7\xbf\xbf\xbf",          // U+1FFFFF
      "\xf8\x88\x80\x80\x80",      // 5-byte form
      "\xfc\x84\x80\x80\x80\x80",  // 6-byte form
      "\xfe",                      // never valid
      "\xff",
      "\x80",      // lone continuation byte
      "a/\xbf/b",  // lone continuation byte inside
  };
  const std::vector<std::string> good = {
      "\x7f",              // DEL is ASCII
      "\xc2\x80",          // U+0080, the smallest 2-byte
      "caf\xc3\xa9",       // U+00E9
      "\xdf\xbf",          // U+07FF
      "\xe0\xa0\x80",      // U+0800, the smallest 3-byte
      "\xe2\x82\xac",      // U+20AC
      "\xed\x9f\xbf",      // U+D7FF, just below the surrogates
      "\xee\x80\x80",      // U+E000, just above them
      "\xef\xbf\xbf",      // U+FFFF
      "\xf0\x90\x80\x80",  // U+10000, the smallest 4-byte
      "\xf0\x9f\x98\x80",  // U+1F600
      "\xf4\x8f\xbf\xbf",  // U+10FFFF, the largest
  };
  for (const auto& s : bad) {
    INFO(escape_for_log(s));
    CHECK_FALSE(valid_utf8(s));
    const auto p = parse(s + "\n");
    CHECK(p.names().empty());
    REQUIRE(p.rejects.total == 1);
    CHECK(p.rejects.examples[0] == "line 1: not valid UTF-8: " + escape_for_log(s));
  }
  for (const auto& s : good) {
    INFO(escape_for_log(s));
    CHECK(valid_utf8(s));
    const auto p = parse("dir/" + s + "\n");
    CHECK(p.names() == Names{"dir/" + s});
    CHECK(p.rejects.total == 0);
  }
  CHECK(valid_utf8(""));
  CHECK(valid_utf8("plain ascii"));
}

TEST_CASE("paths must stay inside the root and are normalised", "[order_parser]") {
  struct Bad {
    const char* path;
    const char* reason;
  };

  for (const Bad& b : {
           Bad{"/etc/passwd", "absolute path"},
           Bad{"/", "absolute path"},
           Bad{"//a", "absolute path"},
           Bad{"..", "escapes the root (..)"},
           Bad{"../x", "escapes the root (..)"},
           Bad{"a/../b", "escapes the root (..)"},
           Bad{"a/..", "escapes the root (..)"},
           Bad{"a/b/../../..", "escapes the root (..)"},
           Bad{"./..", "escapes the root (..)"},
           Bad{"a//..//b", "escapes the root (..)"},
           Bad{".", "names the root, not a file"},
           Bad{"./", "names the root, not a file"},
           Bad{".//./", "names the root, not a file"},
           Bad{".epochfs", "names the mount's control directory"},
           Bad{".epochfs/stats", "names the mount's control directory"},
           Bad{"./.epochfs//x", "names the mount's control directory"},
       }) {
    INFO(b.path);
    const auto p = parse(std::string(b.path) + "\n");
    CHECK(p.names().empty());
    REQUIRE(p.rejects.total == 1);
    CHECK(p.rejects.examples[0] == "line 1: " + std::string(b.reason) + ": " + b.path);
    const char* why = "";
    CHECK_FALSE(normalise_relative(b.path, &why).has_value());
    CHECK(std::string(why) == b.reason);
  }
  const char* why = "";
  CHECK_FALSE(normalise_relative("", &why).has_value());

  struct Good {
    const char* in;
    const char* out;
  };

  for (const Good& g : {
           Good{"./a//b/./c", "a/b/c"},
           Good{"a/", "a"},
           Good{"a/b/", "a/b"},
           Good{"./a", "a"},
           Good{"a/.", "a"},
           Good{"a///b", "a/b"},
           Good{"...", "..."},
           Good{"..a", "..a"},
           Good{"a..", "a.."},
           Good{"a/..b/c", "a/..b/c"},
           Good{".hidden/.x", ".hidden/.x"},
           Good{"with space/ x ", "with space/ x "},
           Good{"back\\slash", "back\\slash"},
           Good{"sub/.epochfs/y", "sub/.epochfs/y"},
           Good{".epochfsx/y", ".epochfsx/y"},
       }) {
    INFO(g.in);
    const auto p = parse(std::string(g.in) + "\n");
    CHECK(p.names() == Names{g.out});
    CHECK(p.rejects.total == 0);
    CHECK(normalise_relative(g.in, &why) == std::string(g.out));
  }
}

TEST_CASE("index-form entries are decimal numbers that fit 32 bits", "[order_parser]") {
  const auto p = parse(
      "#form indices\n"
      "0\n"                        // 2
      " 42 \n"                     // 3: spaces around are trimmed
      "4294967295\n"               // 4: UINT32_MAX
      "4294967296\n"               // 5
      "-1\n"                       // 6
      "+1\n"                       // 7
      "1a\n"                       // 8
      "0x1\n"                      // 9
      "1 2\n"                      // 10
      "99999999999999999999999\n"  // 11
      "a/b\n"                      // 12
      "007\r\n"                    // 13
      "\xd9\xa1\n"                 // 14: ARABIC-INDIC DIGIT ONE
      "1.0\n");                    // 15
  CHECK(p.names() == Names{"0", "42", "4294967295", "007"});
  CHECK(p.lines() == std::vector<uint64_t>{2, 3, 4, 13});
  CHECK(p.rejects.total == 10);
  CHECK(p.entry_lines == 14);
  REQUIRE(p.rejects.examples.size() == RejectReport::kExamples);
  CHECK(p.rejects.examples[0] == "line 5: not an index: 4294967296");
  CHECK(p.rejects.examples[1] == "line 6: not an index: -1");
  CHECK(p.ok());

  CHECK(parse_index("0") == uint32_t{0});
  CHECK(parse_index("007") == uint32_t{7});
  CHECK(parse_index("4294967295") == UINT32_MAX);
  for (const char* bad :
       {"", " 1", "1 ", "-0", "+0", "4294967296", "18446744073709551616", "1e3", "x", "0x1"}) {
    INFO(bad);
    CHECK_FALSE(parse_index(bad).has_value());
  }
}

TEST_CASE("the reject report keeps 5 escaped examples and counts all", "[order_parser]") {
  std::string input;
  for (int i = 0; i < 9; ++i) {
    input += "ok" + std::to_string(i) + "\n";
    input += "/bad\x01\xff\"\\" + std::to_string(i) + "\n";
  }
  const auto p = parse(input);
  CHECK(p.names().size() == 9);
  CHECK(p.rejects.total == 9);
  REQUIRE(p.rejects.examples.size() == 5);
  for (size_t i = 0; i < 5; ++i) {
    CHECK(p.rejects.examples[i] == "line " + std::to_string(2 * i + 2) +
                                       ": not valid UTF-8: /bad\\x01\\xff\\x22\\x5c" +
                                       std::to_string(i));
  }

  RejectReport r;
  r.add(3, "why", "text");
  r.add(4, "why", std::string(200, 'x'));
  CHECK(r.total == 2);
  CHECK(r.examples[0] == "line 3: why: text");
  CHECK(r.examples[1] == "line 4: why: " + std::string(80, 'x') + "...");

  CHECK(escape_for_log("plain text ~!") == "plain text ~!");
  CHECK(escape_for_log("\t\n\r\x7f\x80\xff") == "\\x09\\x0a\\x0d\\x7f\\x80\\xff");
  CHECK(escape_for_log("\0"s) == "\\x00");
  CHECK(escape_for_log("a\"b\\c") == "a\\x22b\\x5cc");
  CHECK(escape_for_log("abcdef", 3) == "abc...");
  CHECK(escape_for_log("abc", 3) == "abc");
  CHECK(escape_for_log("") == "");
}

TEST_CASE("feeding any split of the input gives the same result", "[order_parser]") {
  const std::vector<std::pair<std::string, OrderForm>> inputs = {
      {"#form paths\r\n#epoch 3\r\n#count 4\r\n./a//b\r\n\r\n# c\r\n/x\r\nc\xc3\xa9\r\nd", {}},
      {"#form indices\n#count: 5\n1\n 2 \n-3\n4294967296\n5\n#end\nafter\n", {}},
      {"a\0b\n\xed\xa0\x80\n..\nok\n#end\n\n#end\nlast"s, {}},
      {std::string(5000, 'q') + "\nshort\n" + std::string(4096, 'r') + "\r\n", {}},
      {"7\n8\r\n9", OrderForm::kIndices},
      {"\r\n\r\n\n", {}},
      {"no newline at all", {}},
  };
  for (const auto& [input, form] : inputs) {
    INFO(escape_for_log(input, 120));
    const Parsed whole = parse(input, form);
    CHECK(same(parse_bytewise(input, form), whole));
    for (uint32_t seed = 1; seed <= 200; ++seed) {
      INFO("seed " << seed);
      REQUIRE(same(parse_random_split(input, seed, form), whole));
    }
  }
}

// Malformed inputs, each with the entries that must come out and the number of rejects.
TEST_CASE("a corpus of malformed orders parses to exactly the expected entries", "[order_parser]") {
  struct Case {
    const char* name;
    std::string input;
    Names entries;
    uint64_t rejects;
    bool ok;
  };

  std::string binary;
  for (int i = 0; i < 256; ++i) {
    binary += static_cast<char>((i * 37 + 11) & 0xff);
  }
  const std::vector<Case> corpus = {
      {"binary junk", binary, {}, 2, true},
      {"only newlines", std::string(1000, '\n'), {}, 0, false},
      {"only CRs", std::string(100, '\r') + "\n", {}, 0, false},
      {"only comments", "#a\n#b\n# c d e\n#\n", {}, 0, false},
      {"only directives", "#form paths\n#epoch 1\n#count 0\n#stream s\n", {}, 0, false},
      {"only #end", "#end\n", {}, 0, false},
      {"one huge line", std::string(100000, 'x'), {}, 1, true},
      {"huge line among good ones",
       "a\n" + std::string(100000, '/') + "\nb\n",
       {"a", "b"},
       1,
       true},
      {"a line of slashes", "////\n", {}, 1, true},
      {"dots only", ".\n..\n...\n./.\n", {"..."}, 3, true},
      {"mixed forms, paths default", "1\na/b\n-2\n", {"1", "a/b", "-2"}, 0, true},
      {"mixed forms, indices", "#form indices\n1\na/b\n-2\n3\n", {"1", "3"}, 2, true},
      {"directives after entries", "a\n#count 99\n#form indices\nb\n", {"a", "b"}, 0, true},
      {"directives between entries and #end", "a\n#epoch 2\n#end\n#count 1\n", {"a"}, 1, true},
      {"count cut short", "#count 10\na\nb\nc\n", {"a", "b", "c"}, 0, false},
      {"count too small", "#count 1\na\nb\n", {"a", "b"}, 0, false},
      {"count with bad entries", "#count 3\n/a\nb\n../c\n", {"b"}, 2, true},
      {"repeated and bad directives",
       "#epoch 1\n#epoch 2\n#form x\n#count -1\nz\n",
       {"z"},
       2,
       true},
      {"junk after #end", "a\n#end\n\x01\x02\x03\nb\n", {"a"}, 2, true},
      {"NUL everywhere", "\0\n\0\0\na\0\nb\n"s, {"b"}, 3, true},
      {"invalid UTF-8 mix",
       "\xff\nok\n\xc0\x80\n\xed\xb0\x80\n\xf4\x90\x80\x80\n",
       {"ok"},
       4,
       true},
      {"absolute and escaping", "/a\n../b\nc/../d\n./e\n", {"e"}, 3, true},
      {"normalisation", "./a//b/./c\nx/\n.//y\n", {"a/b/c", "x", "y"}, 0, true},
      {"CR only line endings", "a\rb\rc\r", {"a\rb\rc"}, 0, true},
      {"CRLF with trailing spaces", "a \r\n b\r\n", {"a ", " b"}, 0, true},
      {"tabs as blank lines", "\t\t\n\v\f\n a\n", {" a"}, 0, true},
      {"index overflow", "#form indices\n4294967295\n4294967296\n", {"4294967295"}, 1, true},
      {"index with spaces and CRLF", "#form=indices\r\n 5\t\r\n", {"5"}, 0, true},
      {"comment-like entries", " #x\n\t#y\n", {" #x", "\t#y"}, 0, true},
      {"six bad lines", "/1\n/2\n/3\n/4\n/5\n/6\n", {}, 6, true},
      {"repeated header after #end", "#end\n#end\n#count 1\n", {}, 2, false},
      {"stream id too long", "#stream " + std::string(100, 'a') + "\nq\n", {"q"}, 1, true},
  };
  for (const Case& c : corpus) {
    INFO(c.name);
    const Parsed p = parse(c.input);
    CHECK(p.names() == c.entries);
    CHECK(p.rejects.total == c.rejects);
    CHECK(p.rejects.examples.size() == std::min<uint64_t>(c.rejects, RejectReport::kExamples));
    CHECK(p.ok() == c.ok);
    if (!p.ok()) {
      CHECK(p.finish_errno == EINVAL);
    }
    CHECK(same(parse_random_split(c.input, 99), p));
  }
  // The binary junk: whatever came out is well-formed.
  const Parsed junk = parse(binary);
  for (const auto& name : junk.names()) {
    CHECK(valid_utf8(name));
    CHECK(name.find('\0') == std::string::npos);
    CHECK(name.front() != '/');
  }
}

}  // namespace epochfs::prefetch
