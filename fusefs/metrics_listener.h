// --metrics-listen HOST:PORT: the Prometheus metrics over HTTP (GET /metrics), for scrapers
// that do not read node_exporter's textfile directory.
//
// The socket is bound when the mount starts, before the daemon detaches, so that a port in
// use or a bad address fails the mount with a message; the serving thread starts after the
// fork (threads do not survive it). One connection at a time, each with a 2 s limit to send
// its request and take the answer: a scraper asks every few seconds, and a stuck or slow
// client must not hold the thread. HTTP parsing and writing: Boost.Beast.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "cachestore/status.h"
#include "cachestore/unique_fd.h"

namespace epochfs::fusefs {

class MetricsListener {
 public:
  // Binds host:port ("127.0.0.1:9101", "[::1]:9101", "0.0.0.0:0" for any free port).
  static cachestore::Result<std::unique_ptr<MetricsListener>> bind(const std::string& address);

  ~MetricsListener();
  MetricsListener(const MetricsListener&) = delete;
  MetricsListener& operator=(const MetricsListener&) = delete;

  // Serves make() at /metrics from a thread of its own until destroyed.
  void start(std::function<std::string()> make);

  // The address bound, with the port chosen when 0 was asked: "127.0.0.1:40123".
  const std::string& address() const { return address_; }

 private:
  MetricsListener(cachestore::UniqueFd fd, std::string address);
  void run();
  void serve_one(int fd);

  cachestore::UniqueFd fd_;  // listening, non-blocking
  const std::string address_;
  std::function<std::string()> make_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace epochfs::fusefs
