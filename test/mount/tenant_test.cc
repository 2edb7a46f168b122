// Hostile tenants of a shared node mount (docs/semantics.md, "A shared node: what one user can
// make the daemon do"): a root mount with --allow-other, one ordinary user attacking and
// another training. What the attacker makes the daemon hold is bounded by their own limits,
// and the victim's publishes and reads go on unharmed.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "test/mount/mount_fixture.h"
#include "tools/cli/stats_doc.h"

namespace epochfs::test {
namespace {

namespace fs = std::filesystem;

// Under the sanitizers' allocators freed memory waits in a quarantine or is kept per thread:
// the daemon's RSS does not fall, nor is freed memory reused as glibc would.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kFreedMemoryReturns = false;
#else
constexpr bool kFreedMemoryReturns = true;
#endif

constexpr uid_t kAttacker = 65534;
constexpr uid_t kVictim = 65533;

// fn run as uid in a child that then stays alive, keeping what fn opened or published, until
// this object goes (the child is then killed and reaped).
class Held {
 public:
  Held(uid_t uid, const std::function<int()>& fn, const std::vector<gid_t>& groups = {}) {
    REQUIRE(::pipe2(result_, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(hold_, O_CLOEXEC) == 0);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::close(hold_[1]);
      if (!become_user(uid, groups)) {
        _exit(255);
      }
      const char byte = static_cast<char>(fn());
      (void)!::write(result_[1], &byte, 1);
      char ignored;
      (void)!::read(hold_[0], &ignored, 1);  // until the parent closes its end
      _exit(0);
    }
    ::close(result_[1]);
    ::close(hold_[0]);
  }

  ~Held() {
    ::close(hold_[1]);
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    ::close(result_[0]);
  }

  Held(const Held&) = delete;
  Held& operator=(const Held&) = delete;

  // What fn returned, once it has.
  int result() {
    char byte = 0;
    return ::read(result_[0], &byte, 1) == 1 ? static_cast<unsigned char>(byte) : 255;
  }

 private:
  pid_t pid_ = -1;
  int result_[2] = {-1, -1};
  int hold_[2] = {-1, -1};
};

// A dataset both users may read, under a mount root they may reach.
struct Node {
  TempDir dir;

  explicit Node(int files) {
    write_files(dir / "src", files, 4000);
    fs::permissions(dir.path(),
                    fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec);
  }
};

std::optional<double> stat_in(const Mount& mount, const std::string& key) {
  auto doc = tools::read_stats(mount.path());
  return doc ? doc->number(key) : std::nullopt;
}

// The victim's job: publishes an order of f0..f9 and reads them; 0 if all went well.
int train(const Mount& mount, const std::string& src) {
  std::string order = "#job train\n";
  for (int i = 0; i < 10; ++i) {
    order += "f" + std::to_string(i) + "\n";
  }
  if (const int err = write_order(mount, order); err != 0) {
    return 1;
  }
  for (int i = 0; i < 10; ++i) {
    const std::string name = "/f" + std::to_string(i);
    if (read_file(mount.path() + name) != read_file(src + name)) {
      return 2;
    }
  }
  return 0;
}

TEST_CASE("an upload held open holds no more than its writer's limit", "[mount][tenant]") {
  Node node(10);
  Mount mount(
      node.dir / "src", node.dir / "mnt",
      {"--allow-other", "--max-upload-memory-per-user", "64M", "--max-upload-memory", "256M"});
  const double rss_before = rss_kib(mount.pid());
  // 128 MiB of distinct new paths into one upload, held open: every write up to the refused
  // one keeps the daemon's upload memory within the limit, and the rest are refused.
  Held attack(kAttacker, [&] {
    const int fd = ::open((mount / ".epochfs/big").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
      return 1;
    }
    std::string chunk;
    int refused = 0;
    int first_error = 0;
    for (int round = 0; round < 2048; ++round) {
      chunk.clear();
      while (chunk.size() < (64 << 10) - 128) {
        chunk += std::string(80, 'x') + "/" + std::to_string(round) + "/" +
                 std::to_string(chunk.size()) + "\n";
      }
      if (::write(fd, chunk.data(), chunk.size()) < 0) {
        first_error = first_error == 0 ? errno : first_error;
        ++refused;
      } else if (stat_in(mount, "prefetch.upload_bytes").value_or(1e18) > (64 << 20)) {
        return 2;
      }
    }
    if (first_error != EDQUOT) {
      return 3;
    }
    return refused > 1000 ? 0 : 4;  // fd stays open: the child holds it
  });
  CHECK(attack.result() == 0);
  CHECK(stat_in(mount, "prefetch.upload_bytes") == 0);
  // What the refused upload held went back to the system, not just out of the ledger.
  if (kFreedMemoryReturns) {
    CHECK(rss_kib(mount.pid()) < rss_before + 16 * 1024);
  }
  CHECK(stat_in(mount, "prefetch.uploads_over_limit") == 1);
  CHECK(run_as(kVictim, [&] { return train(mount, node.dir / "src"); }) == 0);
}

TEST_CASE("new paths one user's orders add to the registry stay within their limit",
          "[mount][tenant]") {
  Node node(10);
  Mount mount(node.dir / "src", node.dir / "mnt",
              {"--allow-other", "--max-path-memory-per-user", "256K", "--max-path-memory", "1M"});
  // Order after order of distinct missing paths, from jobs that all live on: the registry
  // keeps them all, charged to their publisher, until an order passes the limit and is
  // refused whole.
  const int refused_at = run_as(kAttacker, [&] {
    for (int order = 0; order < 100; ++order) {
      std::string text = "#job j" + std::to_string(order) + "\n";
      for (int i = 0; i < 1000; ++i) {
        text += "missing/" + std::to_string(order) + "/" + std::to_string(i) + "\n";
      }
      if (write_order(mount, text) != 0) {
        return order;
      }
    }
    return 255;
  });
  CHECK(refused_at > 0);
  CHECK(refused_at < 100);
  CHECK(stat_of(mount, "prefetch.path_bytes") <= 256 << 10);
  // The victim's job publishes and trains as before.
  CHECK(run_as(kVictim, [&] { return train(mount, node.dir / "src"); }) == 0);
}

TEST_CASE("paths only ended jobs' orders named are forgotten, and their charge given back",
          "[mount][tenant]") {
  Node node(10);
  Mount mount(node.dir / "src", node.dir / "mnt", {"--allow-other"});
  const double known = stat_of(mount, "files_known");
  double rss_after_first = 0;
  // Job after job, each an order of 20,000 new missing paths of ~1 KB (20 MB), ending with its
  // process: each job's paths leave the registry, and their charge goes back to the user.
  for (int round = 0; round < 4; ++round) {
    REQUIRE(run_as(kAttacker, [&] {
              std::string order = "#job flood\n";
              for (int i = 0; i < 20000; ++i) {
                order += std::string(1000, 'x') + "/" + std::to_string(round) + "/" +
                         std::to_string(i) + "\n";
              }
              return write_order(mount, order);
            }) == 0);
    const double released = 20000.0 * (round + 1);
    CHECK(wait_for_stat(mount, "paths_released", released) == released);
    // The ids recycled too: their records' charge came back.
    CHECK(wait_for_stat(mount, "prefetch.path_bytes", 0, Until::kFalls) == 0);
    CHECK(stat_of(mount, "files_known") == known);
    rss_after_first = round == 0 ? rss_kib(mount.pid()) : rss_after_first;
  }
  // The later rounds reused the first one's memory (without reclaiming, 60 MB more).
  if (kFreedMemoryReturns) {
    CHECK(rss_kib(mount.pid()) < rss_after_first + 16 * 1024);
  }
  // A path the kernel looked up stays, though only an ended job's order named it.
  { std::ofstream(node.dir / "src/new") << "x"; }
  REQUIRE(run_as(kAttacker, [&] {
            return write_order(mount, "#job once\nnew\n") == 0 && read_file(mount / "new") == "x"
                       ? 0
                       : 1;
          }) == 0);
  CHECK(wait_for_stat(mount, "prefetch.jobs_ended", 5) == 5);
  CHECK(run_as(kVictim, [&] { return train(mount, node.dir / "src"); }) == 0);
  CHECK(stat_of(mount, "paths_released") == 80000);
}

TEST_CASE("one user's publishing takes no more of the daemon's time than its share",
          "[mount][tenant]") {
  Node node(10);
  // A millisecond of CPU at once, then a tenth of a core: an order of 200,000 new paths takes
  // far more, and its user then waits while another user publishes.
  Mount mount(node.dir / "src", node.dir / "mnt",
              {"--allow-other", "--max-publish-cpu-per-user", "0.001"});
  const auto order_of = [](const std::string& job, int n) {
    std::string order = "#job " + job + "\n";
    for (int i = 0; i < n; ++i) {
      order += "new/" + std::to_string(i) + "\n";
    }
    return order;
  };
  CHECK(run_as(kAttacker, [&] { return write_order(mount, order_of("a", 200000)); }) == 0);
  CHECK(run_as(kAttacker, [&] { return write_order(mount, order_of("b", 10)); }) != 0);
  auto doc = tools::read_stats(mount.path());
  REQUIRE(doc.has_value());
  CHECK(contains(doc->values["prefetch.last_publish.message"],
                 "used its share of the daemon's time for publishing"));
  CHECK(run_as(kVictim, [&] { return train(mount, node.dir / "src"); }) == 0);
}

TEST_CASE("one number, --max-memory, sets what users' orders may make the daemon hold",
          "[mount][tenant]") {
  Node node(10);
  // 48M: uploads being written 8M in all, 2M a user; an order of 200,000 new paths needs more.
  Mount mount(node.dir / "src", node.dir / "mnt", {"--allow-other", "--max-memory", "48M"});
  std::string order = "#job big\n";
  for (int i = 0; i < 200000; ++i) {
    order += "new/" + std::to_string(i) + "\n";
  }
  CHECK(run_as(kAttacker, [&] { return write_order(mount, order); }) != 0);
  auto doc = tools::read_stats(mount.path());
  REQUIRE(doc.has_value());
  CHECK(contains(doc->values["prefetch.last_publish.message"], "--max-upload-memory-per-user"));
  CHECK(run_as(kVictim, [&] { return train(mount, node.dir / "src"); }) == 0);
  // Too small to hold any order: refused at mount, saying so.
  const CommandResult tiny = run_epochfs(
      {"mount", node.dir / "src", node.dir / "mnt2", "--max-memory", "1M", "--foreground"});
  CHECK(tiny.exit_code != 0);
  CHECK(contains(tiny.output, "--max-memory 1M"));
}

TEST_CASE("one user's jobs cannot take every stream of the mount", "[mount][tenant]") {
  Node node(10);
  Mount mount(node.dir / "src", node.dir / "mnt", {"--allow-other"});
  // 5 jobs of 64 streams each, all inside the per-job and per-job-count limits: the user's
  // 256 streams are granted, the rest refused; the publisher stays alive to keep them.
  Held attack(kAttacker, [&] {
    int published = 0;
    for (int job = 0; job < 5; ++job) {
      for (int s = 0; s < 64; ++s) {
        const std::string order =
            "#job j" + std::to_string(job) + "\n#stream s" + std::to_string(s) + "\nf0\n";
        published += write_order(mount, order) == 0 ? 1 : 0;
      }
    }
    return published == 256 ? 0 : 1;
  });
  CHECK(attack.result() == 0);
  CHECK(stat_in(mount, "prefetch.publishes_over_limit") == 64);
  CHECK(run_as(kVictim, [&] { return train(mount, node.dir / "src"); }) == 0);
}

TEST_CASE("one user holding opens cannot take the daemon's descriptors", "[mount][tenant]") {
  if (!opens_reach_daemon()) {
    return;  // no-open: the kernel opens files without the daemon, which holds no descriptor
  }
  Node node(10);
  Mount mount(node.dir / "src", node.dir / "mnt", {"--allow-other", "--max-opens-per-user", "100"});
  // 300 opens of one file and of the root directory, all held: the first 100 are granted.
  Held attack(kAttacker, [&] {
    int granted = 0;
    int refused = 0;
    for (int i = 0; i < 300; ++i) {
      const bool dir = i % 2 == 1;
      const std::string path = dir ? mount.path() : mount / "f0";
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (dir ? O_DIRECTORY : 0));
      granted += fd >= 0 ? 1 : 0;
      refused += fd < 0 && errno == EMFILE ? 1 : 0;
    }
    return granted == 100 && refused == 200 ? 0 : 1;
  });
  CHECK(attack.result() == 0);
  // The other user opens, lists and reads the stats as before.
  CHECK(run_as(kVictim, [&] {
          std::vector<int> fds;
          for (int i = 0; i < 100; ++i) {
            fds.push_back(::open((mount / "f1").c_str(), O_RDONLY | O_CLOEXEC));
          }
          const bool all = std::all_of(fds.begin(), fds.end(), [](int fd) { return fd >= 0; });
          for (int fd : fds) {
            ::close(fd);
          }
          const bool listed = fs::directory_iterator(mount.path()) != fs::directory_iterator();
          return all && listed && stat_in(mount, "opens").has_value()
                     ? train(mount, node.dir / "src")
                     : 1;
        }) == 0);
}

TEST_CASE("a user's stats show their own jobs and others' only as counts", "[mount][tenant]") {
  Node node(10);
  Mount mount(node.dir / "src", node.dir / "mnt", {"--allow-other"});
  // The victim's job and order name things the attacker must not learn; the job lives while
  // its publisher does.
  Held victim(kVictim, [&] {
    return write_order(mount, "#job victim-secret-job\nf1\nvictim-secret-path\n");
  });
  REQUIRE(victim.result() == 0);
  // The attacker's own publish, then its view: its stream and verdict, the other's counted.
  CHECK(run_as(kAttacker, [&] {
          if (write_order(mount, "#job mine\nf2\n") != 0) {
            return 1;
          }
          auto text = read_file(mount / ".epochfs/stats");
          auto doc = tools::read_stats(mount.path());
          if (!text || !doc || contains(*text, "victim-secret")) {
            return 2;
          }
          if (doc->number("prefetch.streams_of_other_users") != 1) {
            return 3;
          }
          return doc->values["prefetch.last_publish.message"].find("job mine") != std::string::npos
                     ? 0
                     : 4;
        }) == 0);
  auto metrics = run_as(kAttacker, [&] {
    auto text = read_file(mount / ".epochfs/metrics");
    return text && !contains(*text, "victim-secret") ? 0 : 1;
  });
  CHECK(metrics == 0);
  // Root sees every stream.
  auto full = read_file(mount / ".epochfs/stats");
  REQUIRE(full.has_value());
  CHECK(contains(*full, "victim-secret-job"));
  CHECK(stat_of(mount, "prefetch.streams_of_other_users") == 0);
}

TEST_CASE("an order is staged only with its publisher's rights", "[mount][tenant]") {
  Node node(10);
  // The victim's private directory, and a file of theirs only they may read.
  const std::string priv = node.dir / "src/private";
  fs::create_directory(priv);
  write_files(priv, 1, 5000);
  fs::create_directory(node.dir / "src/open");
  write_files(node.dir / "src/open", 1, 6000);
  fs::permissions(node.dir / "src/open/f0", fs::perms::owner_read);
  REQUIRE(::chown(priv.c_str(), kVictim, kVictim) == 0);
  REQUIRE(::chown((priv + "/f0").c_str(), kVictim, kVictim) == 0);
  fs::permissions(priv, fs::perms::owner_all);
  Mount mount(node.dir / "src", node.dir / "mnt", {"--allow-other"});
  // The attacker names the victim's file, a root-only file in a readable directory, a missing
  // one and one it may read: only the last is staged, and the three others are counted alike.
  Held attack(kAttacker, [&] {
    return write_order(mount, "#stream probe\nprivate/f0\nopen/f0\nmissing\nf1\n");
  });
  REQUIRE(attack.result() == 0);
  wait_for_staging(mount);
  CHECK(stat_of(mount, "cache.files_staged") == 1);
  CHECK(stat_of(mount, "cache.bytes_staged") == 4000);
  CHECK(stat_of(mount, "prefetch.streams.probe.rejected_entries") == 3);
  // The victim's own order of the same file is staged.
  Held victim(kVictim, [&] { return write_order(mount, "#stream mine\nprivate/f0\n"); });
  REQUIRE(victim.result() == 0);
  wait_for_staging(mount);
  CHECK(stat_of(mount, "cache.files_staged") == 2);
  CHECK(run_as(kVictim, [&] {
          return read_file(mount / "private/f0") == read_file(priv + "/f0") ? 0 : 1;
        }) == 0);
  // Cached now, the victim's file is still refused to the attacker's order, as a missing one.
  Held again(kAttacker, [&] { return write_order(mount, "#stream probe2\nprivate/f0\nnone\n"); });
  REQUIRE(again.result() == 0);
  wait_for_staging(mount);
  CHECK(stat_of(mount, "prefetch.streams.probe2.rejected_entries") == 2);
}

TEST_CASE("a cached block is read ahead only for a publisher who may read its file",
          "[mount][tenant][ranges]") {
  Node node(1);
  const std::string priv = node.dir / "src/private";
  fs::create_directory(priv);
  std::ofstream(priv + "/data.bin", std::ios::binary) << std::string(2 << 20, 'v');
  REQUIRE(::chown(priv.c_str(), kVictim, kVictim) == 0);
  REQUIRE(::chown((priv + "/data.bin").c_str(), kVictim, kVictim) == 0);
  fs::permissions(priv, fs::perms::owner_all);
  Mount mount(node.dir / "src", node.dir / "mnt", {"--allow-other"});
  const std::string ranges =
      "#form ranges\n0 4096 private/data.bin\n1048576 4096 private/data.bin\n";
  Held victim(kVictim, [&] { return write_order(mount, "#stream mine\n" + ranges); });
  REQUIRE(victim.result() == 0);
  wait_for_staging(mount);
  REQUIRE(stat_of(mount, "cache.files_cached") == 2);
  const double before = stat_of(mount, "cache.read_ahead");
  // The attacker's order names the victim's cached blocks: refused as missing, not read ahead.
  Held attack(kAttacker, [&] { return write_order(mount, "#stream probe\n" + ranges); });
  REQUIRE(attack.result() == 0);
  CHECK(wait_for_stat(mount, "prefetch.streams.probe.rejected_entries", 2) == 2);
  wait_for_staging(mount);
  CHECK(stat_of(mount, "cache.read_ahead") == before);
  // The victim's next epoch of the same blocks is.
  Held again(kVictim, [&] { return write_order(mount, "#stream mine\n#epoch 1\n" + ranges); });
  REQUIRE(again.result() == 0);
  CHECK(wait_for_stat(mount, "cache.read_ahead", before + 2) >= before + 2);
}

TEST_CASE("a right confirmed for a user in one group is not one for them in another",
          "[mount][tenant][rights]") {
  // The same user with and without the one group that may read a file (newgrp, sg): the
  // daemon's memory of a confirmed right is keyed by user, group and supplementary groups.
  constexpr gid_t kReaders = 65530;
  Node node(1);
  const std::string secret = node.dir / "src/secret";
  std::ofstream(secret) << std::string(5000, 's');
  REQUIRE(::chown(secret.c_str(), 0, kReaders) == 0);
  fs::permissions(secret, fs::perms::owner_read | fs::perms::group_read);
  Mount mount(node.dir / "src", node.dir / "mnt", {"--allow-other"});
  Held member(kAttacker, [&] { return write_order(mount, "#stream member\nsecret\n"); },
              {kReaders});
  REQUIRE(member.result() == 0);
  wait_for_staging(mount);
  CHECK(stat_of(mount, "cache.files_staged") == 1);
  CHECK(stat_of(mount, "prefetch.streams.member.rejected_entries") == 0);
  // Cached and confirmed for the member: the same user outside the group is checked anew.
  Held outsider(kAttacker, [&] { return write_order(mount, "#stream outsider\nsecret\n"); });
  REQUIRE(outsider.result() == 0);
  wait_for_staging(mount);
  CHECK(stat_of(mount, "prefetch.streams.outsider.rejected_entries") == 1);
  CHECK(stat_of(mount, "cache.files_staged") == 1);
}

TEST_CASE("a user's publishes look entries up in the source at a bounded rate", "[mount][tenant]") {
  // Each publish looks up to 16 of its entries up in the source on the publisher's behalf;
  // one user publishing without pause gets 64 look-ups at once, then 16 a second, and the
  // next user's publish is looked up in full.
  constexpr int kPublishes = 12;
  Node node(20);
  Mount mount(node.dir / "src", node.dir / "mnt", {"--allow-other"});
  std::string order;
  for (int i = 0; i < 20; ++i) {
    order += "f" + std::to_string(i) + "\n";
  }
  const auto looked_up = [&] {
    return stat_in(mount, "prefetch.last_publish.looked_up").value_or(1000);
  };
  const auto started = std::chrono::steady_clock::now();
  Held flood(kAttacker, [&] {
    double sum = 0;
    for (int i = 0; i < kPublishes; ++i) {
      if (const int err = write_order(mount, "#job flood\n#epoch 0\n" + order); err != 0) {
        return 200 + err;
      }
      sum += looked_up();
    }
    return static_cast<int>(sum);
  });
  const int sum = flood.result();
  const double elapsed_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  INFO(sum << " look-ups in " << elapsed_s << " s");
  CHECK(sum >= 64);
  CHECK(sum <= 64 + 16 * elapsed_s + 1);
  CHECK(run_as(kVictim, [&] {
          return write_order(mount, "#job train\n" + order) == 0 ? static_cast<int>(looked_up())
                                                                 : 254;
        }) == 16);
}

}  // namespace

TEST_CASE("one user's range order changes how only that user's job reads the file",
          "[mount][tenant][ranges]") {
  Node node(1);
  const std::string data = node.dir / "src/data.bin";
  std::string bytes(4 << 20, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = static_cast<char>(i * 7 + i / 4096);
  }
  std::ofstream(data, std::ios::binary) << bytes;
  Mount mount(node.dir / "src", node.dir / "mnt", {"--allow-other"});
  const auto block_reads = [&] {
    return stat_of(mount, "block_hits") + stat_of(mount, "block_misses");
  };
  // Each read goes to the daemon: the kernel's pages of the file are dropped first.
  const auto read_as = [&](uid_t uid) {
    const int fd = ::open((mount / "data.bin").c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    REQUIRE(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0);
    ::close(fd);
    return run_as(uid, [&] { return read_file(mount / "data.bin") == bytes ? 0 : 1; });
  };
  {
    // The attacker's job says it reads data.bin by ranges, and stays alive.
    Held attack(kAttacker, [&] {
      return write_order(mount,
                         "#job ranges\n#form ranges\n0 4096 data.bin\n2097152 4096 "
                         "data.bin\n");
    });
    REQUIRE(attack.result() == 0);
    wait_for_staging(mount);
    // The attacker's own reads of the file go by blocks ...
    CHECK(read_as(kAttacker) == 0);
    const double after_attacker = block_reads();
    CHECK(after_attacker > 0);
    // ... the victim's, of the same file at the same time, whole as before.
    CHECK(read_as(kVictim) == 0);
    CHECK(block_reads() == after_attacker);
  }
  // The attacker's job ended with its process: its reads of the file are whole again.
  REQUIRE(wait_for_stat(mount, "prefetch.jobs_ended", 1) == 1);
  const double before = block_reads();
  CHECK(read_as(kAttacker) == 0);
  CHECK(block_reads() == before);
}

}  // namespace epochfs::test
