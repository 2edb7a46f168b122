#include "cachestore/root_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>

#include "test/support/scratch_dir.h"

namespace epochfs::cachestore {
namespace {

namespace fs = std::filesystem;

// A scratch tree: root/{file, dir/inner, link_in -> file, link_out -> outside, dirlink -> dir}
// and outside/secret next to root.
struct Tree {
  test::ScratchDir dir{"rootdir"};
  fs::path base = dir.path();
  fs::path root = base / "root";

  Tree() {
    fs::create_directories(root / "dir");
    fs::create_directories(base / "outside");
    std::ofstream(root / "file") << "inside";
    std::ofstream(root / "dir" / "inner") << "inner";
    std::ofstream(base / "outside" / "secret") << "secret";
    fs::create_symlink("file", root / "link_in");
    fs::create_symlink(base / "outside" / "secret", root / "link_out");
    fs::create_symlink("../outside", root / "dirlink");
  }
};

}  // namespace

TEST_CASE("RootDir opens files inside the root", "[root_dir]") {
  Tree t;
  auto root = RootDir::open(t.root);
  REQUIRE(root.is_ok());
  auto fd = root.value().open_at("dir/inner", O_RDONLY);
  REQUIRE(fd.is_ok());
  char buf[16] = {};
  CHECK(::read(fd.value().get(), buf, sizeof(buf)) == 5);
  CHECK(std::string(buf) == "inner");
  CHECK(root.value().stat_at("").is_ok());
}

TEST_CASE("RootDir never follows a symlink or leaves the root", "[root_dir]") {
  Tree t;
  auto root = RootDir::open(t.root);
  REQUIRE(root.is_ok());
  const RootDir& r = root.value();
  // Trailing symlinks are not followed, whether they point inside or outside.
  CHECK(r.open_at("link_in", O_RDONLY).error_code() == ELOOP);
  CHECK(r.open_at("link_out", O_RDONLY).error_code() == ELOOP);
  // Nor are symlinks in the middle of a path.
  CHECK(r.open_at("dirlink/secret", O_RDONLY).error_code() == ELOOP);
  // ".." cannot climb out; absolute paths are refused.
  CHECK(r.open_at("../outside/secret", O_RDONLY).error_code() == EXDEV);
  CHECK(r.open_at("dir/../../outside/secret", O_RDONLY).error_code() == EXDEV);
  CHECK(r.open_at(t.base / "outside" / "secret", O_RDONLY).error_code() == EXDEV);
  // Magic links in /proc are refused too, even if the root contains a path to them.
  fs::create_symlink("/proc/self/root", t.root / "proc_root");
  CHECK(!r.open_at("proc_root/etc/passwd", O_RDONLY).is_ok());
}

TEST_CASE("RootDir describes symlinks instead of following them", "[root_dir]") {
  Tree t;
  auto root = RootDir::open(t.root);
  REQUIRE(root.is_ok());
  auto st = root.value().stat_at("link_out");
  REQUIRE(st.is_ok());
  CHECK(S_ISLNK(st.value().st_mode));
  auto target = root.value().readlink_at("link_out");
  REQUIRE(target.is_ok());
  CHECK(target.value() == (t.base / "outside" / "secret").string());
  CHECK(root.value().readlink_at("file").error_code() == EINVAL);
}

TEST_CASE("RootDir reports errors with errno and the path", "[root_dir]") {
  Tree t;
  CHECK(RootDir::open((t.base / "missing").string()).error_code() == ENOENT);
  CHECK(RootDir::open((t.root / "file").string()).error_code() == ENOTDIR);
  auto root = RootDir::open(t.root);
  REQUIRE(root.is_ok());
  auto missing = root.value().stat_at("nope");
  CHECK(missing.error_code() == ENOENT);
  CHECK(missing.status().to_string().find("nope") != std::string::npos);
}

TEST_CASE("RootDir checks access with the caller's credentials", "[root_dir]") {
  Tree t;
  chmod(t.base.c_str(), 0755);
  std::ofstream(t.root / "closed") << "x";
  chmod((t.root / "closed").c_str(), 0);
  auto root = RootDir::open(t.root);
  REQUIRE(root.is_ok());
  CHECK(root.value().access_at("file", R_OK).is_ok());
  CHECK(root.value().access_at("file", X_OK).error_code() == EACCES);
  CHECK(root.value().access_at("missing", R_OK).error_code() == ENOENT);
  // As an unprivileged user, a mode-000 file is not readable.
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    constexpr uid_t kNobody = 65534;
    if (setresgid(kNobody, kNobody, kNobody) != 0 || setresuid(kNobody, kNobody, kNobody) != 0) {
      _exit(2);
    }
    const bool denied = root.value().access_at("closed", R_OK).error_code() == EACCES;
    const bool allowed = root.value().access_at("file", R_OK).is_ok();
    _exit(denied && allowed ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("RootDir passes extended attributes through", "[root_dir]") {
  Tree t;
  auto root = RootDir::open(t.root);
  REQUIRE(root.is_ok());
  const std::string file = (t.root / "file").string();
  if (::setxattr(file.c_str(), "user.epochfs", "v1", 2, 0) != 0) {
    WARN("the scratch filesystem has no user xattrs; skipped");
    return;
  }
  char buf[16] = {};
  auto size = root.value().getxattr_at("file", "user.epochfs", nullptr, 0);
  REQUIRE(size.is_ok());
  CHECK(size.value() == 2);
  auto n = root.value().getxattr_at("file", "user.epochfs", buf, sizeof(buf));
  REQUIRE(n.is_ok());
  CHECK(std::string(buf, n.value()) == "v1");
  auto list = root.value().listxattr_at("file", buf, sizeof(buf));
  REQUIRE(list.is_ok());
  CHECK(std::string(buf) == "user.epochfs");
}

}  // namespace epochfs::cachestore
