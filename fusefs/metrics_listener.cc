#include "fusefs/metrics_listener.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <sstream>

#include <boost/asio/buffer.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/http.hpp>

#include "cachestore/log.h"
#include "cachestore/sync.h"
#include "cachestore/unique_fd.h"

namespace epochfs::fusefs {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using cachestore::Result;
using cachestore::Status;

namespace {

constexpr int kClientTimeoutS = 2;
constexpr int kStopPollMs = 200;  // how soon the thread sees that the mount ends

// "host:port", "[v6]:port": the endpoint, or an error saying what is wrong.
Result<asio::ip::tcp::endpoint> parse_address(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon + 1 == text.size()) {
    return Status::error(EINVAL, "--metrics-listen " + text + ": expected HOST:PORT");
  }
  std::string host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const std::string port = text.substr(colon + 1);
  if (port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5 ||
      std::stoul(port) > 65535) {
    return Status::error(EINVAL, "--metrics-listen " + text + ": bad port " + port);
  }
  boost::system::error_code ec;
  const auto ip = asio::ip::make_address(host, ec);
  if (ec) {
    return Status::error(EINVAL, "--metrics-listen " + text + ": bad address " + host);
  }
  return asio::ip::tcp::endpoint(ip, static_cast<unsigned short>(std::stoul(port)));
}

std::string to_text(const asio::ip::tcp::endpoint& e) {
  const std::string host = e.address().to_string();
  return (e.address().is_v6() ? "[" + host + "]" : host) + ":" + std::to_string(e.port());
}

using Deadline = std::chrono::steady_clock::time_point;

// Milliseconds left until deadline, at least 0.
int ms_left(Deadline deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return left.count() > 0 ? static_cast<int>(left.count()) : 0;
}

// Waits until fd is ready for events, or the deadline.
bool wait_ready(int fd, short events, Deadline deadline) {
  pollfd p{fd, events, 0};
  const int left = ms_left(deadline);
  return left > 0 && ::poll(&p, 1, left) == 1;
}

// The request's head (up to the blank line; at most kMaxHead bytes) before the deadline.
bool read_head(int fd, Deadline deadline, std::string& head) {
  constexpr size_t kMaxHead = 8192;
  char buf[2048];
  while (head.find("\r\n\r\n") == std::string::npos) {
    if (head.size() > kMaxHead || !wait_ready(fd, POLLIN, deadline)) {
      return false;
    }
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      return false;
    }
    head.append(buf, static_cast<size_t>(n));
  }
  return true;
}

// Sends all of data before the deadline; a client gone or too slow gets what was sent.
void send_all(int fd, Deadline deadline, const std::string& data) {
  for (size_t sent = 0; sent < data.size() && wait_ready(fd, POLLOUT, deadline);) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      return;
    }
    sent += static_cast<size_t>(n);
  }
}

}  // namespace

Result<std::unique_ptr<MetricsListener>> MetricsListener::bind(const std::string& address) {
  auto endpoint = parse_address(address);
  if (!endpoint.is_ok()) {
    return endpoint.status();
  }
  // A plain socket: no Asio io_context exists before the daemon forks.
  auto e = endpoint.value();
  cachestore::UniqueFd fd(
      ::socket(e.protocol().family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  const int one = 1;
  if (!fd.valid() || ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
      ::bind(fd.get(), e.data(), static_cast<socklen_t>(e.size())) != 0 ||
      ::listen(fd.get(), SOMAXCONN) != 0) {
    return Status::error(errno, "--metrics-listen " + address);
  }
  socklen_t len = static_cast<socklen_t>(e.capacity());
  if (::getsockname(fd.get(), e.data(), &len) != 0) {
    return Status::error(errno, "--metrics-listen " + address);
  }
  e.resize(len);
  return std::unique_ptr<MetricsListener>(new MetricsListener(std::move(fd), to_text(e)));
}

MetricsListener::MetricsListener(cachestore::UniqueFd fd, std::string address)
    : fd_(std::move(fd)), address_(std::move(address)) {}

MetricsListener::~MetricsListener() {
  stopping_ = true;
  if (thread_.joinable()) {
    thread_.join();
  }
}

void MetricsListener::start(std::function<std::string()> make) {
  make_ = std::move(make);
  thread_ = std::thread([this] { run(); });
  cachestore::log(cachestore::LogLevel::kInfo, "metrics: serving http://%s/metrics",
                  address_.c_str());
}

void MetricsListener::run() {
  cachestore::name_this_thread("epochfs-metrics");
  const int listen_fd = fd_.get();
  while (!stopping_) {
    pollfd p{listen_fd, POLLIN, 0};
    if (::poll(&p, 1, kStopPollMs) <= 0) {
      continue;
    }
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      continue;
    }
    try {
      serve_one(fd);
    } catch (const std::exception& e) {
      cachestore::log(cachestore::LogLevel::kDebug, "metrics: a request failed: %s", e.what());
    }
    ::close(fd);
  }
}

// Reads one request from fd and answers it: the metrics at GET /metrics, 404 elsewhere, 405
// for other methods. Beast parses and writes the messages; the socket I/O here is bounded by
// one deadline (a blocking read behind Asio would wait for a silent client forever).
void MetricsListener::serve_one(int fd) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kClientTimeoutS);
  std::string head;
  if (!read_head(fd, deadline, head)) {
    return;
  }
  http::request_parser<http::empty_body> parser;
  boost::system::error_code ec;
  parser.put(asio::buffer(head), ec);
  if (ec || !parser.is_header_done()) {
    return;
  }
  const auto& request = parser.get();
  http::response<http::string_body> response;
  response.version(request.version());
  response.keep_alive(false);
  if (request.method() != http::verb::get) {
    response.result(http::status::method_not_allowed);
  } else if (request.target() != "/metrics") {
    response.result(http::status::not_found);
    response.body() = "epochfs: the metrics are at /metrics\n";
  } else {
    response.result(http::status::ok);
    response.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
    response.body() = make_();
  }
  response.prepare_payload();
  std::ostringstream out;
  out << response;
  send_all(fd, deadline, out.str());
}

}  // namespace epochfs::fusefs
