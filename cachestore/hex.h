// Lower-case hexadecimal digits of 64-bit values, without printf: a cached file's object name
// is formed at each of its hits (CacheDir::object_name), and snprintf took ~200 ns of it.
#pragma once

#include <cstdint>
#include <string>

namespace epochfs::cachestore {

// Writes v as exactly 16 lower-case hex digits at out (no terminator).
inline void put_hex64(uint64_t v, char* out) {
  static constexpr char kDigits[] = "0123456789abcdef";
  for (int i = 15; i >= 0; --i) {
    out[i] = kDigits[v & 0xf];
    v >>= 4;
  }
}

// v as 16 lower-case hex digits.
inline std::string hex64(uint64_t v) {
  std::string s(16, '0');
  put_hex64(v, s.data());
  return s;
}

}  // namespace epochfs::cachestore
