#!/usr/bin/env bash
# Static checks CI runs before building: formatting, and the one-way dependencies
# tools/lab -> tools/cli -> fusefs -> prefetch -> cachestore (a backward #include fails the
# check); the shipped CLI includes nothing of the lab or the test fixtures.
set -euo pipefail
cd "$(dirname "$0")/../.."

mapfile -t sources < <(git ls-files '*.h' '*.cc' 2>/dev/null || find . -name '*.h' -o -name '*.cc')
clang-format --dry-run --Werror "${sources[@]}"

status=0
backward() {  # backward MODULE PATTERN: MODULE must not include PATTERN
  if grep -nE "#include \"($2)/" -r "$1" --include='*.h' --include='*.cc'; then
    echo "check: $1 includes a module above it" >&2
    status=1
  fi
}
backward cachestore 'prefetch|fusefs|tools|test'
backward prefetch 'fusefs|tools|test'
backward fusefs 'tools|test'
backward tools/cli 'tools/lab|test'
# A module shows the modules above it its front door and the small types it hands out; a
# header above that includes anything else of it for a type points at the wrong house.
exposes() {  # exposes MODULE 'HEADER|...' FILES...: FILES include only those of MODULE's headers
  local module=$1 allowed=$2
  shift 2
  if grep -nE "#include \"$module/" "$@" | grep -vE "#include \"$module/($allowed)\.h\""; then
    echo "check: a header above $module includes one of its internals (it shows: $allowed)" >&2
    status=1
  fi
}
exposes cachestore 'cache_store|eviction_policy|file_id|file_version|id_index|id_table|root_dir|status|sync|unique_fd' \
  prefetch/*.h fusefs/*.h
exposes prefetch 'engine|file_registry|order_parser' fusefs/*.h
# Only the adapter talks to libfuse (the fixture filesystems under test/fixtures are FUSE
# programs of their own).
if grep -nE '#include <fuse' -r cachestore prefetch fusefs tools --include='*.h' --include='*.cc' |
    grep -v -e '^fusefs/fuse_ops.h:'; then
  echo "check: only fusefs/fuse_ops.h may include libfuse" >&2
  status=1
fi
# Every FUSE operation that replies runs inside Guarded (fusefs/fuse_ops.cc): no exception may
# cross into libfuse's C code. Only init and forget (no reply) may be registered bare.
if grep -nE '^\s*ops\.[a-z_]+ = op_' fusefs/fuse_ops.cc |
    grep -vE 'ops\.(init|forget|forget_multi) = op_'; then
  echo "check: register FUSE operations as Guarded<op_...>::call" >&2
  status=1
fi
# CMake splits a list at ';': a test named with one would be registered as two tests that
# match nothing, and pass without running.
if grep -nE 'TEST_CASE\("[^"]*;' -r test --include='*.cc'; then
  echo "check: no ';' in a test's name" >&2
  status=1
fi
# A core file longer than this hides its steps: split it by job (engine_*.cc, cache_store_*.cc).
for f in cachestore/*.h cachestore/*.cc prefetch/*.h prefetch/*.cc fusefs/*.h fusefs/*.cc; do
  if (($(wc -l <"$f") > 450)); then
    echo "check: $f has more than 450 lines" >&2
    status=1
  fi
done
exit $status
