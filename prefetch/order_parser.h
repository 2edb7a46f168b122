// OrderParser: reads a shuffle file (docs/user-guide.md, "The shuffle file") as a stream.
//
// Input arrives in chunks of any size (FUSE writes, reads of a watched file); the parser keeps
// only the current line, so a 10-million-line order costs memory only for the schedule its
// sink builds. Lines end with LF or CRLF. A line is one of:
//   - blank: ignored;
//   - `#keyword value` before the first entry, with keyword one of form, epoch, stream, count,
//     job, manifest, or `#restart` (no value):
//     a directive (the first of each keyword wins, later ones are ignored);
//   - `#end`: the end marker; lines after it are rejected;
//   - any other line starting with `#`: a comment;
//   - an entry: a relative path (form paths, the default), a decimal index into the manifest
//     (form indices), or a byte range "OFFSET LENGTH PATH" of a file (form ranges).
// Entries are checked for what can be decided without the source: valid UTF-8, no NUL, not too
// long, relative, no `..`, not inside the mount's control directory; paths are normalised (`./a//b`
// becomes `a/b`). A bad entry is skipped and reported; the rest still count. finish() checks
// `#count N`: exactly N entry lines (good or bad) were read. That is the guard against a writer cut
// short: without it a truncated file would look like a shorter order. A plain list with no header
// is accepted as is.
//
// Thread-safety: none; one parser per input.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cachestore/status.h"

namespace epochfs::prefetch {

// The mount's control directory (fusefs/control_dir.h). It shadows a real one at the top of the
// source, so no entry may name anything under it: such a file cannot be read through the mount.
inline constexpr char kControlDirName[] = ".epochfs";

// The version of the shuffle-file format this parser reads, in the stats (`order_format`) so
// that a writer can tell whether the daemon reads what it writes: 1, the first; 2 added
// `#restart`; 3 added `#form ranges`. A daemon reads every earlier format too.
inline constexpr uint64_t kOrderFormat = 3;

// paths: an entry is a relative path; indices: an index into the job's manifest; ranges: byte
// ranges of files, "OFFSET LENGTH PATH" (prefetch/blocks.h).
enum class OrderForm : uint8_t { kPaths, kIndices, kRanges };

struct OrderHeader {
  std::optional<OrderForm> form;
  std::optional<uint64_t> epoch;
  std::optional<std::string> stream;
  std::optional<uint64_t> count;
  // The job the upload belongs to (prefetch/jobs.h); without it, the writer's session.
  std::optional<std::string> job;
  // A manifest's name within its job; for an index-form order, the manifest it indexes.
  std::optional<std::string> manifest;
  // The stream starts afresh at this epoch: every epoch queued before is dropped (an epoch
  // published ahead that the trainer will not read, e.g. before a resume from a checkpoint).
  bool restart = false;
};

// What was skipped, for stats and the log: counts by reason and the first few examples.
struct RejectReport {
  static constexpr size_t kExamples = 5;

  uint64_t total = 0;
  std::vector<std::string> examples;  // "line 12: escapes the root: ../etc/passwd"

  void add(uint64_t line, std::string_view reason, std::string_view text);
};

// Escapes text for a log line or JSON string: printable ASCII kept, anything else as \xNN;
// at most max_bytes of input are shown.
std::string escape_for_log(std::string_view text, size_t max_bytes = 80);

// Longest line accepted, in bytes (PATH_MAX).
inline constexpr size_t kMaxLineBytes = 4096;

class OrderParser {
 public:
  // Called for each accepted entry of form paths (a normalised relative path), indices (the
  // index, as a string of digits; see parse_index) or ranges (format_range of the range with
  // its path normalised). line: 1-based line number.
  using EntrySink = std::function<void(std::string_view entry, uint64_t line)>;

  // default_form: the form when the header has no `#form` (manifests are always paths).
  OrderParser(EntrySink sink, RejectReport* rejects, OrderForm default_form = OrderForm::kPaths);

  void feed(std::string_view bytes);

  // End of input. Fails (EINVAL, with the reason) when the order must not be published:
  // a `#count` that does not match, or an input with no entries at all.
  cachestore::Status finish();

  const OrderHeader& header() const { return header_; }

  OrderForm form() const { return header_.form.value_or(default_form_); }

  uint64_t entry_lines() const { return entry_lines_; }

  // The form in effect once the first entry was seen; later `#form` lines are ignored.
  bool entries_started() const { return entry_lines_ > 0; }

 private:
  void line(std::string_view text);
  void directive(std::string_view text);
  void entry(std::string_view text);
  void reject(std::string_view reason, std::string_view text);

  EntrySink sink_;
  RejectReport* rejects_;
  OrderForm default_form_;
  OrderHeader header_;
  std::string partial_;    // the current line, not yet ended
  bool overlong_ = false;  // the current line passed kMaxLineBytes: skip to its end
  bool ended_ = false;     // an `#end` line was read
  uint64_t line_no_ = 0;
  uint64_t entry_lines_ = 0;
};

// Normalises a relative path from an order or manifest: drops empty and `.` components.
// nullopt, with the reason in *why, if it is absolute, has a `..` component, is empty or is
// under the control directory.
std::optional<std::string> normalise_relative(std::string_view path, const char** why);

// A decimal index (no sign, no spaces, fits 32 bits); nullopt otherwise.
std::optional<uint32_t> parse_index(std::string_view text);

// True if text is well-formed UTF-8 (no overlong forms, surrogates or code points > U+10FFFF).
bool valid_utf8(std::string_view text);

}  // namespace epochfs::prefetch
