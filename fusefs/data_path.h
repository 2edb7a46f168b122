// DataPath: how reads of cached files reach the reader, as `--data-path` names it.
#pragma once

namespace epochfs::fusefs {

// kClassic, every read is a request to the daemon; kPassthrough, the kernel reads cached
// copies itself where it can (Linux 6.9+, root), else classic (fusefs/passthrough.h); kAuto,
// the same, logged as a choice rather than a demand; kNoOpen, the kernel opens files without
// asking the daemon and keeps their pages (fusefs/implicit_opens.h).
enum class DataPath { kAuto, kClassic, kPassthrough, kNoOpen };

}  // namespace epochfs::fusefs
