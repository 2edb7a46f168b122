// Sanitizer canary: this program reads past a heap buffer. In the ASan build ctest expects it
// to fail; if it ever passes, the sanitizer is not really on and a green run means less.
#include <cstdio>
#include <cstdlib>

int main(int argc, char**) {
  char* volatile buf = static_cast<char*>(malloc(8));
  const int value = buf[8 + argc];  // out of bounds by design
  printf("%d\n", value);
  free(buf);
  return 0;
}
