// The parts of the kernel's FUSE ABI that Debian 12's linux/fuse.h (protocol 7.38) lacks: the
// INIT reply's later fields (passthrough, 7.40) and FUSE over io_uring (7.42).
#pragma once

#include <cstdint>

namespace epochfs::fusefs::abi {

constexpr uint32_t kPassthroughFlag2 = 1u << 5;  // FUSE_PASSTHROUGH = 1ULL << 37, in flags2
constexpr uint32_t kOverIoUringFlag2 = 1u << 9;  // FUSE_OVER_IO_URING = 1ULL << 41, in flags2

struct InitOut {  // struct fuse_init_out
  uint32_t major;
  uint32_t minor;
  uint32_t max_readahead;
  uint32_t flags;
  uint16_t max_background;
  uint16_t congestion_threshold;
  uint32_t max_write;
  uint32_t time_gran;
  uint16_t max_pages;
  uint16_t map_alignment;
  uint32_t flags2;
  uint32_t max_stack_depth;
  uint32_t unused[6];
};

static_assert(sizeof(InitOut) == 64);

// FUSE over io_uring (fs/fuse/dev_uring.c): the commands, in the SQE's cmd_op.
constexpr uint32_t kUringRegister = 1;        // FUSE_IO_URING_CMD_REGISTER
constexpr uint32_t kUringCommitAndFetch = 2;  // FUSE_IO_URING_CMD_COMMIT_AND_FETCH

struct UringEntInOut {  // struct fuse_uring_ent_in_out
  uint64_t flags;
  uint64_t commit_id;   // the request's unique
  uint32_t payload_sz;  // bytes in the payload buffer, either way
  uint32_t padding;
  uint64_t reserved;
};

// An entry's header buffer (struct fuse_uring_req_header): in_out holds the request's
// fuse_in_header, then the reply's fuse_out_header; op_in the request's first argument.
struct UringReqHeader {
  char in_out[128];
  char op_in[128];
  UringEntInOut ent;
};

static_assert(sizeof(UringReqHeader) == 288);

struct UringCmdReq {  // struct fuse_uring_cmd_req, in the SQE's cmd area
  uint64_t flags;
  uint64_t commit_id;
  uint16_t qid;
  uint8_t padding[6];
};

static_assert(sizeof(UringCmdReq) == 24);

}  // namespace epochfs::fusefs::abi
