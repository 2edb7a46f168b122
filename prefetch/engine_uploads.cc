// Engine, continued: uploads of orders and manifests, charged to their writers, and the
// look-ups in the source of a few entries of each order as it is published.
#include <errno.h>
#include <sys/stat.h>

#include <cmath>
#include <cstdio>

#include "prefetch/credentials.h"
#include "prefetch/engine.h"

namespace epochfs::prefetch {

using cachestore::now_ns;
using cachestore::Status;

std::unique_ptr<OrderUpload> Engine::begin_upload(OrderUpload::Kind kind, Publisher publisher) {
  // The mount's own order (--shuffle-file) is the operator's, not a user's: not charged.
  const bool charged = !publisher.is_mount;
  Credentials creds = publisher.creds;
  auto upload = std::make_unique<OrderUpload>(
      kind, std::move(publisher), registry_, *planner_, charged ? &uploads_ : nullptr,
      options_.limits.entries_per_user, charged ? &paths_ : nullptr);
  // The ids it finds are not handed out again for other paths until it is done (one held
  // open holds back every id's recycling, not their release: engine_reclaim.cc).
  upload->hold(Grace::Ticket(grace_));
  if (charged) {
    meter_cpu(*upload, creds.uid);
  }
  if (cache_) {
    upload->look_up_entries_with(
        [this, charged, creds = std::move(creds)](const std::string& rel) -> std::optional<bool> {
          if (charged && !look_ups_.take(creds.uid, now_ns())) {
            return std::nullopt;  // over the user's rate: not looked up, not counted
          }
          return names_file(rel, creds);
        });
  }
  return upload;
}

void Engine::meter_cpu(OrderUpload& upload, uid_t uid) {
  // Parsing, registering and publishing are the daemon's work on a user's behalf, as long
  // as they write: charged by the CPU time they take, so that one user who publishes order
  // after order cannot take the daemon's cores from everyone else's opens.
  if (const double wait_s = publish_cpu_.wait_s(uid, now_ns()); wait_s > 0) {
    char why[256];
    snprintf(why, sizeof(why),
             "user %u used its share of the daemon's time for publishing (%.0f s of CPU at "
             "once, then %.0f%% of a core: --max-publish-cpu-per-user): publish again in %.0f s",
             static_cast<unsigned>(uid), options_.limits.publish_cpu_burst_s,
             100 * options_.limits.publish_cpu_share, std::ceil(wait_s));
    upload.refuse_from_start(why);
    return;
  }
  upload.meter_cpu_with([this, uid](int64_t ns) {
    publish_cpu_.spend(uid, static_cast<double>(ns) / 1e6, now_ns());
  });
}

std::optional<bool> Engine::names_file(const std::string& rel_path, const Credentials& creds) {
  if (guard_.down()) {
    return std::nullopt;  // an outage is not a wrong path
  }
  // With an answer of our own (nullopt): an outage ends the call at once instead of holding
  // the publish for --outage-wait; a hung source holds it for one --source-timeout, after
  // which the source is down and nothing more is looked up. Captured by value: a call the
  // guard gives up on may still run after this returns.
  auto found = guard_.call<bool>(
      rel_path, true, [root = &source_, rel_path, creds]() -> cachestore::Result<bool> {
        auto st = root->stat_at(rel_path);
        Status readable = !st.is_ok()                    ? st.status()
                          : !S_ISREG(st.value().st_mode) ? Status::error(EISDIR, rel_path)
                                                         : may_read_as(*root, rel_path, creds);
        if (readable.is_ok() || !is_outage_error(readable.error_code())) {
          return readable.is_ok();
        }
        return readable;
      });
  return found.is_ok() ? std::optional<bool>(found.value()) : std::nullopt;
}

}  // namespace epochfs::prefetch
