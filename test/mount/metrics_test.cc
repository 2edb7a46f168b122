// Watching a mount, on real mounts: .epochfs/metrics and --metrics-file parse as Prometheus's
// text exposition format (every sample under a TYPE line, names epochfs_*, counters *_total,
// every sample labelled with the mount point and source) and agree with .epochfs/stats; the
// metrics file goes with the mount; `epochfs stats --watch` redraws a live view on a terminal
// (a pseudo-terminal made by script(1)) and prints plain lines elsewhere.
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "test/mount/mount_fixture.h"
#include "tools/cli/mount_table.h"
#include "tools/cli/stats_doc.h"
#include "tools/lab/dataset.h"

#include <arpa/inet.h>
#include <netinet/in.h>

namespace epochfs::test {
namespace {

namespace fs = std::filesystem;

// Samples by name with their own labels ("epochfs_stream_epoch{stream=\"default\"}"), the
// mount's labels (mountpoint and source) checked on every sample and left out of the key; a
// failed check for any line that is not valid exposition text.
std::map<std::string, double> parse_prometheus(const std::string& text, const std::string& mnt,
                                               const std::string& src) {
  const std::string mount_labels = "{mountpoint=\"" + mnt + "\",source=\"" + src + "\"";
  static const std::regex kHelp(R"(# HELP (epochfs_[a-z0-9_]+) \S.*)");
  static const std::regex kType(R"(# TYPE (epochfs_[a-z0-9_]+) (counter|gauge|histogram))");
  static const std::regex kHistogramPart(R"((epochfs_[a-z0-9_]+)_(bucket|sum|count))");
  static const std::regex kSample(
      R"re((epochfs_[a-z0-9_]+)(\{[a-z_]+="(?:\\.|[^"\\])*"(?:,[a-z_]+="(?:\\.|[^"\\])*")*\})? (\S+))re");
  std::map<std::string, double> samples;
  std::map<std::string, std::string> types;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    INFO(line);
    std::smatch m;
    if (std::regex_match(line, m, kHelp)) {
      continue;
    }
    if (std::regex_match(line, m, kType)) {
      CHECK(types.count(m[1]) == 0);  // one TYPE line per family
      types[m[1]] = m[2];
      if (m[2] == "counter") {
        CHECK(std::string(m[1]).size() > 6);
        CHECK(std::string(m[1]).substr(std::string(m[1]).size() - 6) == "_total");
      }
      continue;
    }
    REQUIRE(std::regex_match(line, m, kSample));
    std::smatch part;
    const std::string name = m[1];
    const bool in_histogram = std::regex_match(name, part, kHistogramPart) &&
                              types.count(part[1]) == 1 && types[part[1]] == "histogram";
    CHECK((types.count(name) == 1 || in_histogram));  // its family was declared before it
    const std::string labels = m[2];
    REQUIRE(labels.rfind(mount_labels, 0) == 0);
    std::string own = labels.substr(mount_labels.size());  // "}" or ",name=...}"
    own = own == "}" ? "" : "{" + own.substr(1);
    const std::string value = m[3];
    samples[std::string(m[1]) + own] =
        value == "+Inf" ? std::numeric_limits<double>::infinity() : std::stod(value);
  }
  return samples;
}

void read_all(const Mount& mount, int count) {
  for (int i = 0; i < count; ++i) {
    REQUIRE(read_file(mount / ("f" + std::to_string(i))).has_value());
  }
}

}  // namespace

TEST_CASE(".epochfs/metrics is Prometheus text that agrees with the stats", "[mount][metrics]") {
  TempDir dir;
  write_files(dir / "src", 10, 50000);
  Mount mount(dir / "src", dir / "mnt");
  std::string order;
  for (int i = 0; i < 10; ++i) {
    order += "f" + std::to_string(i) + "\n";
  }
  { std::ofstream(dir / "order.txt") << order; }
  REQUIRE(run_epochfs({"publish", mount.path(), dir / "order.txt"}).exit_code == 0);
  read_all(mount, 10);
  read_all(mount, 10);
  auto text = read_file(mount / ".epochfs/metrics");
  REQUIRE(text.has_value());
  const auto m = parse_prometheus(*text, mount.path(), dir / "src");
  const auto metric = [&](const std::string& key) {
    INFO(key);
    REQUIRE(m.count(key) == 1);
    return m.at(key);
  };
  // The stats are read after the metrics: counters can only have grown since.
  CHECK(metric("epochfs_opens_total") == 20);
  CHECK(metric("epochfs_opens_total") == stat_of(mount, "opens"));
  CHECK(metric("epochfs_cache_hits_total") + metric("epochfs_cache_misses_total") == 20);
  CHECK(metric("epochfs_cache_hits_total") <= stat_of(mount, "hits"));
  CHECK(metric("epochfs_read_from_source_bytes_total") <= stat_of(mount, "bytes_from_source"));
  // No --cache-size: the stats say null, the metric +Inf.
  CHECK(metric("epochfs_cache_capacity_bytes") == std::numeric_limits<double>::infinity());
  CHECK(metric("epochfs_cache_files") == stat_of(mount, "cache.files_cached"));
  CHECK(metric("epochfs_publishes_total") == stat_of(mount, "prefetch.publishes"));
  CHECK(metric("epochfs_reads_ahead_total") == stat_of(mount, "cache.read_ahead"));
  // A stream's series carry its name, job and user: the one stream here is "default".
  const auto stream_metric = [&](const std::string& family) {
    const std::string prefix = family + "{stream=\"default\",job=\"";
    auto it = m.lower_bound(prefix);
    INFO(family);
    REQUIRE((it != m.end() && it->first.rfind(prefix, 0) == 0));
    CHECK(it->first.find(",uid=\"0\"}") != std::string::npos);
    return it->second;
  };
  CHECK(stream_metric("epochfs_stream_epoch_length_files") >= 0);
  CHECK(stream_metric("epochfs_stream_opens_total") ==
        stat_of(mount, "prefetch.streams.default.total.opens"));
  CHECK(metric("epochfs_data_path_passthrough") >= 0);
  CHECK(metric("epochfs_cache_errors_total{kind=\"io\"}") == 0);
  // Every open is in the open latency histogram's last (+Inf) bucket, and in its count.
  CHECK(metric("epochfs_open_latency_seconds_bucket{le=\"+Inf\"}") == 20);
  CHECK(metric("epochfs_open_latency_seconds_count") == 20);
  CHECK(metric("epochfs_open_latency_seconds_bucket{le=\"0.0001\"}") <= 20);
  CHECK(metric("epochfs_copy_latency_seconds_count") ==
        metric("epochfs_copy_latency_seconds_bucket{le=\"+Inf\"}"));
  // A verify counts in both.
  CHECK(metric("epochfs_verify_runs_total") == 0);
  REQUIRE(read_file(mount / ".epochfs/verify").has_value());
  const auto after = parse_prometheus(read_file(mount / ".epochfs/metrics").value_or(""),
                                      mount.path(), dir / "src");
  REQUIRE(after.count("epochfs_verify_runs_total") == 1);
  CHECK(after.at("epochfs_verify_runs_total") == 1);
  CHECK(after.at("epochfs_verify_runs_total") == stat_of(mount, "verify_runs"));
  CHECK(after.at("epochfs_verify_opens_shared_total") == stat_of(mount, "verify_opens_shared"));
}

// An operator sees what an open costs in the kernel's requests: counted by kind as answered.
TEST_CASE("the stats and the metrics count the kernel's requests by kind", "[mount][metrics]") {
  TempDir dir;
  write_files(dir / "src", 10, 50000);
  Mount mount(dir / "src", dir / "mnt");
  // Each stats document counts its own OPEN, not yet its RELEASE: between two of them, the
  // 20 opens of files plus one of the stats file each.
  auto before = tools::read_stats(mount.path());
  REQUIRE(before.has_value());
  read_all(mount, 10);
  read_all(mount, 10);
  auto after = tools::read_stats(mount.path());
  REQUIRE(after.has_value());
  const auto grew = [&](const std::string& key) {
    return after->number(key).value_or(-1) - before->number(key).value_or(0);
  };
  CHECK(grew("requests.open") == 21);
  CHECK(grew("requests.release") == 21);
  CHECK(grew("opens") == 20);
  CHECK(after->number("requests.lookup").value_or(0) >= 10);  // each name at least once
  // An open costs at least its OPEN and RELEASE, and few more round trips.
  CHECK(stat_of(mount, "requests.per_open") >= 2);
  CHECK(stat_of(mount, "requests.per_open") < 8);
  const auto m = parse_prometheus(read_file(mount / ".epochfs/metrics").value_or(""), mount.path(),
                                  dir / "src");
  REQUIRE(m.count("epochfs_requests_total{kind=\"open\"}") == 1);
  CHECK(m.at("epochfs_requests_total{kind=\"open\"}") > after->number("requests.open"));
}

TEST_CASE("the metrics file is written at once and rewritten as the figures change",
          "[mount][metrics]") {
  TempDir dir;
  write_files(dir / "src", 5, 50000);
  const std::string file = dir / "epochfs.prom";
  Mount mount(dir / "src", dir / "mnt", {"--metrics-file", file});
  const auto opens_in_file = [&]() -> double {
    auto text = read_file(file);
    if (!text) {
      return -1;
    }
    const auto m = parse_prometheus(*text, mount.path(), dir / "src");
    return m.count("epochfs_opens_total") ? m.at("epochfs_opens_total") : -1;
  };
  for (int i = 0; i < 100 && opens_in_file() < 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  CHECK(opens_in_file() == 0);
  read_all(mount, 5);
  // Rewritten every 5 s: within 12 s the file shows the opens.
  for (int i = 0; i < 120 && opens_in_file() < 5; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  CHECK(opens_in_file() == 5);
  CHECK_FALSE(fs::exists(file + ".tmp"));
  // The mount ends, and its figures with it: node_exporter shows no frozen series.
  REQUIRE(run_epochfs({"unmount", mount.path()}).exit_code == 0);
  CHECK(mount.wait_exit() == 0);
  CHECK_FALSE(fs::exists(file));
}

TEST_CASE("two mounts' metrics are distinct series", "[mount][metrics]") {
  TempDir dir;
  write_files(dir / "a", 2, 1000);
  write_files(dir / "b", 2, 1000);
  Mount first(dir / "a", dir / "mnt-a");
  Mount second(dir / "b", dir / "mnt-b");
  read_all(first, 2);
  const auto a =
      parse_prometheus(read_file(first / ".epochfs/metrics").value_or(""), first.path(), dir / "a");
  const auto b = parse_prometheus(read_file(second / ".epochfs/metrics").value_or(""),
                                  second.path(), dir / "b");
  REQUIRE(a.count("epochfs_opens_total") == 1);
  REQUIRE(b.count("epochfs_opens_total") == 1);
  CHECK(a.at("epochfs_opens_total") == 2);
  CHECK(b.at("epochfs_opens_total") == 0);
}

namespace {

// A TCP connection to host:port (IPv4); -1 if refused.
int connect_to(const std::string& address) {
  const auto colon = address.rfind(':');
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  REQUIRE(inet_pton(AF_INET, address.substr(0, colon).c_str(), &to.sin_addr) == 1);
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  if (connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// method target from host:port over HTTP/1.1: the whole answer (status line, headers, body).
std::string http_get(const std::string& address, const std::string& target,
                     const std::string& method = "GET") {
  const int fd = connect_to(address);
  REQUIRE(fd >= 0);
  const std::string request = method + " " + target + " HTTP/1.1\r\nHost: test\r\n\r\n";
  CHECK(write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size()));
  std::string answer;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) {
    answer.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return answer;
}

// The address the daemon logged it serves the metrics at, waited for.
std::string served_at(const std::string& log) {
  static const std::regex kServing(R"(metrics: serving http://(\S+)/metrics)");
  for (int i = 0; i < 100; ++i) {
    std::smatch m;
    const std::string text = read_file(log).value_or("");
    if (std::regex_search(text, m, kServing)) {
      return m[1];
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  FAIL("no 'metrics: serving' line in " << log);
  return "";
}

}  // namespace

TEST_CASE("the metrics over HTTP with --metrics-listen, and a bad or taken address refused",
          "[mount][metrics]") {
  TempDir dir;
  write_files(dir / "src", 3, 1000);
  const std::string log = dir / "log";
  Mount mount(dir / "src", dir / "mnt", {"--metrics-listen", "127.0.0.1:0", "--log-file", log});
  read_all(mount, 3);
  const std::string address = served_at(log);
  const std::string answer = http_get(address, "/metrics");
  INFO(answer);
  REQUIRE(answer.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(contains(answer, "Content-Type: text/plain; version=0.0.4"));
  const auto m =
      parse_prometheus(answer.substr(answer.find("\r\n\r\n") + 4), mount.path(), dir / "src");
  REQUIRE(m.count("epochfs_opens_total") == 1);
  CHECK(m.at("epochfs_opens_total") == 3);
  CHECK(http_get(address, "/").rfind("HTTP/1.1 404", 0) == 0);
  CHECK(http_get(address, "/metrics", "DELETE").rfind("HTTP/1.1 405", 0) == 0);
  {
    // A client that connects and says nothing does not hold the listener: it is dropped.
    const int silent = connect_to(address);
    REQUIRE(silent >= 0);
    CHECK(http_get(address, "/metrics").rfind("HTTP/1.1 200 OK", 0) == 0);
    close(silent);
  }
  // The port is taken, and an address is no address: the mount fails at once, saying why.
  fs::create_directories(dir / "mnt2");
  const CommandResult taken = run_epochfs(
      {"mount", "--foreground", dir / "src", dir / "mnt2", "--metrics-listen", address});
  CHECK(taken.exit_code == 1);
  CHECK(contains(taken.output, "cannot listen: --metrics-listen " + address));
  const CommandResult bad = run_epochfs({"mount", "--foreground", "--no-cache", dir / "src",
                                         dir / "mnt2", "--metrics-listen", "9101"});
  CHECK(bad.exit_code == 1);
  CHECK(contains(bad.output, "expected HOST:PORT"));
  CHECK_FALSE(fs::exists(dir / "mnt2/f0"));
}

TEST_CASE("a daemon in the background serves the metrics on the socket bound before its fork",
          "[mount][metrics]") {
  TempDir dir;
  write_files(dir / "src", 2, 1000);
  const std::string mnt = dir / "mnt";
  fs::create_directories(mnt);
  const std::string log = dir / "log";

  struct Unmount {
    std::string path;

    ~Unmount() { tools::unmount_or_detach(path); }  // also when a check below fails
  } unmount{mnt};

  const CommandResult mounted = run_epochfs({"mount", "--no-cache", dir / "src", mnt,
                                             "--metrics-listen", "127.0.0.1:0", "--log-file", log});
  REQUIRE(mounted.exit_code == 0);
  const std::string address = served_at(log);
  // Port 0: the port chosen is told in the terminal, not only in the log.
  CHECK(mounted.output == "epochfs: metrics at http://" + address + "/metrics\n");
  CHECK(http_get(address, "/metrics").rfind("HTTP/1.1 200 OK", 0) == 0);
  CHECK(run_epochfs({"unmount", mnt}).exit_code == 0);
  CHECK(connect_to(address) < 0);  // the daemon and its socket are gone
}

namespace {

// Runs command under a pseudo-terminal (script(1)); its output.
std::string run_on_terminal(const std::string& command) {
  const std::string line = "script -qec '" + command + "' /dev/null 2>&1";
  FILE* pipe = popen(line.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof(buf), pipe)) {
    out.append(buf, n);
  }
  pclose(pipe);
  return out;
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

}  // namespace

TEST_CASE("stats --watch redraws a live view on a terminal and prints lines elsewhere",
          "[mount][watch]") {
  TempDir dir;
  write_files(dir / "src", 20, 50000);
  Mount mount(dir / "src", dir / "mnt", {"--cache-size", "4M"});
  std::string order;
  for (int i = 0; i < 20; ++i) {
    order += "f" + std::to_string(i) + "\n";
  }
  { std::ofstream(dir / "order.txt") << order; }
  REQUIRE(run_epochfs({"publish", mount.path(), dir / "order.txt"}).exit_code == 0);
  read_all(mount, 10);

  const std::string watch =
      std::string(EPOCHFS_BINARY) + " stats " + mount.path() + " --watch --count 3 --interval 0.2";
  const std::string screen = run_on_terminal(watch);
  INFO(screen);
  CHECK(count_of(screen, "\x1b[H\x1b[2J") == 3);  // three redraws in place
  CHECK(count_of(screen, "stream default  epoch 0 [") == 3);
  CHECK(screen.find("50% (10/20)") != std::string::npos);  // the position through the epoch
  CHECK(screen.find("cache  [") != std::string::npos);

  auto plain = run_epochfs({"stats", mount.path(), "--watch", "--count", "2", "--interval", "0.2"});
  INFO(plain.output);
  CHECK(plain.exit_code == 0);
  CHECK(plain.output.find('\x1b') == std::string::npos);
  CHECK(count_of(plain.output, "stream default  epoch 0  50% (10/20)") == 2);
}

TEST_CASE("stats prints a summary a person reads, and every counter on request", "[mount][watch]") {
  TempDir dir;
  write_files(dir / "src", 20, 50000);
  Mount mount(dir / "src", dir / "mnt");
  auto quiet = run_epochfs({"stats", mount.path()});
  INFO(quiet.output);
  CHECK(quiet.exit_code == 0);
  CHECK(quiet.output.find("no order published") != std::string::npos);
  CHECK(quiet.output.find("no problems counted") != std::string::npos);

  // An order with one entry naming no file, half of it read.
  std::string order = "gone\n";
  for (int i = 0; i < 20; ++i) {
    order += "f" + std::to_string(i) + "\n";
  }
  { std::ofstream(dir / "order.txt") << order; }
  REQUIRE(run_epochfs({"publish", mount.path(), dir / "order.txt"}).exit_code == 0);
  read_all(mount, 10);
  wait_for_staging(mount);
  auto summary = run_epochfs({"stats", mount.path()});
  INFO(summary.output);
  CHECK(summary.exit_code == 0);
  CHECK(summary.output.find("reads  10 opens:") != std::string::npos);
  CHECK(summary.output.find("stream default  epoch 0  ") != std::string::npos);
  CHECK(summary.output.find("1 entries of stream default name no file") != std::string::npos);
  CHECK(summary.output.find("cache.files_cached") == std::string::npos);  // no raw keys

  auto all = run_epochfs({"stats", mount.path(), "--all"});
  CHECK(all.exit_code == 0);
  CHECK(all.output.find("cache.files_cached") != std::string::npos);
  CHECK(all.output.find("requests.per_open") != std::string::npos);
}

}  // namespace epochfs::test
