// RingEntry: one FUSE worker's io_uring, holding one entry of one of the kernel's FUSE queues
// (fusefs/uring_transport.h): registering it, taking the request the kernel put into it in
// /dev/fuse's format, and answering it (which hands the entry back for the next request).
//
// Thread-safety: none; each belongs to one worker thread.
#pragma once

#include <liburing.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "fusefs/fuse_abi.h"

namespace epochfs::fusefs::uring {

class RingEntry {
 public:
  // Completion tags: the entry's command, or the read of the device.
  static constexpr uint64_t kEntry = 0;
  static constexpr uint64_t kDeviceRead = 1;
  // The largest request /dev/fuse gives (libfuse's buffer: 1 MiB of data and a page).
  static constexpr size_t kDeviceBuffer = (size_t{1} << 20) + 4096;

  // A ring with an entry of queue qid on dev_fd, registered, its payload buffer of
  // payload_size; with reads_device, also a read of the device queued (FORGET and INTERRUPT
  // still come that way). Null if the ring cannot be made (logged).
  static std::unique_ptr<RingEntry> make(int dev_fd, uint16_t qid, size_t payload_size,
                                         bool reads_device);
  ~RingEntry();
  RingEntry(const RingEntry&) = delete;
  RingEntry& operator=(const RingEntry&) = delete;

  uint16_t qid() const { return qid_; }

  io_uring* ring() { return &ring_; }

  // The request the kernel put into the entry, rebuilt into buf as /dev/fuse gives it; its
  // length, or 0 if it does not fit or add up (then it is answered EIO).
  size_t take_request(char* buf, size_t len);
  // The device read's got bytes into buf (at most len); queues the next read.
  size_t take_device_request(char* buf, size_t len, size_t got);
  // The entry was registered before the kernel had processed INIT: again.
  void register_again();
  void read_device_again();

  // Whether the entry holds the request a reply with this unique answers.
  bool holds(uint64_t unique) const { return unique_ != 0 && unique_ == unique; }

  // Answers the request with iov (a fuse_out_header, then the reply's arguments) and hands the
  // entry back; false if the reply does not fit (then EIO is answered) or the ring refused.
  bool reply(const struct iovec* iov, int count);

 private:
  RingEntry() = default;
  void prepare(uint32_t op, uint64_t commit_id);
  void prepare_device_read();
  void answer_error(int err);

  io_uring ring_ = {};
  bool ring_made_ = false;
  int dev_fd_ = -1;
  uint16_t qid_ = 0;
  std::unique_ptr<abi::UringReqHeader> header_ = std::make_unique<abi::UringReqHeader>();
  std::unique_ptr<char[]> payload_;
  struct iovec iov_[2] = {};
  uint64_t unique_ = 0;  // the request the entry holds (0: none)
  std::unique_ptr<char[]> device_buffer_;
};

}  // namespace epochfs::fusefs::uring
