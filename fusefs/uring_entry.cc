#include "fusefs/uring_entry.h"

#include <linux/fuse.h>
#include <string.h>

#include <algorithm>

#include "cachestore/log.h"
#include "cachestore/status.h"

namespace epochfs::fusefs::uring {
namespace {

// Zeroes an SQE of a ring made with IORING_SETUP_SQE128: 128 bytes, though the struct (and
// so the compiler) knows 64.
void clear_sqe(io_uring_sqe* sqe) {
  void* raw = sqe;
  asm("" : "+r"(raw));  // hides the struct's size from the bounds check
  memset(raw, 0, 2 * sizeof(io_uring_sqe));
}

}  // namespace

std::unique_ptr<RingEntry> RingEntry::make(int dev_fd, uint16_t qid, size_t payload_size,
                                           bool reads_device) {
  std::unique_ptr<RingEntry> e(new RingEntry);
  io_uring_params params = {};
  params.flags = IORING_SETUP_SQE128;  // the command's arguments take the SQE's second half
  if (const int rc = io_uring_queue_init_params(4, &e->ring_, &params); rc < 0) {
    cachestore::log(cachestore::LogLevel::kError, "fuse ring: io_uring_setup: %s",
                    cachestore::error_text(-rc).c_str());
    return nullptr;
  }
  e->ring_made_ = true;
  e->dev_fd_ = dev_fd;
  e->qid_ = qid;
  e->payload_.reset(new char[payload_size]);
  e->iov_[0] = {e->header_.get(), sizeof(abi::UringReqHeader)};
  e->iov_[1] = {e->payload_.get(), payload_size};
  e->prepare(abi::kUringRegister, 0);
  if (reads_device) {
    e->device_buffer_.reset(new char[kDeviceBuffer]);
    e->prepare_device_read();
  }
  io_uring_submit(&e->ring_);
  return e;
}

// With its worker: the kernel ends a request the entry still held with ECONNABORTED.
RingEntry::~RingEntry() {
  if (ring_made_) {
    io_uring_queue_exit(&ring_);
  }
}

void RingEntry::prepare(uint32_t op, uint64_t commit_id) {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);  // never full: at most two in flight
  clear_sqe(sqe);
  sqe->opcode = IORING_OP_URING_CMD;
  sqe->fd = dev_fd_;
  sqe->cmd_op = op;
  sqe->user_data = kEntry;
  if (op == abi::kUringRegister) {
    sqe->addr = reinterpret_cast<uint64_t>(iov_);
    sqe->len = 2;
  }
  auto* req = reinterpret_cast<abi::UringCmdReq*>(sqe->cmd);
  req->commit_id = commit_id;
  req->qid = qid_;
}

void RingEntry::prepare_device_read() {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  clear_sqe(sqe);
  io_uring_prep_read(sqe, dev_fd_, device_buffer_.get(), kDeviceBuffer, 0);
  sqe->user_data = kDeviceRead;
}

size_t RingEntry::take_request(char* buf, size_t len) {
  unique_ = header_->ent.commit_id;
  fuse_in_header in;
  memcpy(&in, header_->in_out, sizeof(in));
  const size_t payload = header_->ent.payload_sz;
  // The kernel puts the first argument in op_in and the others in the payload.
  const bool fits = in.len <= len && in.len >= sizeof(in) + payload && payload <= iov_[1].iov_len &&
                    in.len - sizeof(in) - payload <= sizeof(header_->op_in);
  if (!fits) {
    answer_error(EIO);
    return 0;
  }
  const size_t first = in.len - sizeof(in) - payload;
  memcpy(buf, &in, sizeof(in));
  memcpy(buf + sizeof(in), header_->op_in, first);
  memcpy(buf + sizeof(in) + first, payload_.get(), payload);
  return in.len;
}

size_t RingEntry::take_device_request(char* buf, size_t len, size_t got) {
  const size_t n = std::min(got, len);
  memcpy(buf, device_buffer_.get(), n);
  read_device_again();
  return n;
}

void RingEntry::register_again() {
  prepare(abi::kUringRegister, 0);
  io_uring_submit(&ring_);
}

void RingEntry::read_device_again() {
  prepare_device_read();
  io_uring_submit(&ring_);
}

void RingEntry::answer_error(int err) {
  const fuse_out_header out{sizeof(out), -err, unique_};

  const struct iovec iov { const_cast<fuse_out_header*>(&out), sizeof(out) };

  reply(&iov, 1);
}

bool RingEntry::reply(const struct iovec* iov, int count) {
  size_t payload = 0;
  for (int i = 1; i < count; ++i) {
    if (payload + iov[i].iov_len > iov_[1].iov_len) {
      answer_error(EIO);
      return false;
    }
    memcpy(payload_.get() + payload, iov[i].iov_base, iov[i].iov_len);
    payload += iov[i].iov_len;
  }
  // The reply's header in place of the request's; its arguments back to back in the payload.
  memcpy(header_->in_out, iov[0].iov_base, sizeof(fuse_out_header));
  header_->ent.payload_sz = static_cast<uint32_t>(payload);
  prepare(abi::kUringCommitAndFetch, unique_);
  unique_ = 0;
  return io_uring_submit(&ring_) >= 0;
}

}  // namespace epochfs::fusefs::uring
