// The pserver's accept4(): the C library's, through the accept guard
// (common/launch/accept_guard.h), so that gRPC's listener, which calls
// accept4() through the dynamic linker, never sees EMFILE; and its close(),
// which tells the guard of every connection closed (the count per
// address). An executable's
// definition of a C library function takes the place of the library's for
// every shared library it loads (ELF symbol interposition); the library's
// own is found with dlsym(RTLD_NEXT). Linked into the pserver binary only.
#include <dlfcn.h>
#include <sys/socket.h>

#include <cerrno>

#include "common/launch/accept_guard.h"

extern "C" int accept4(int fd, sockaddr* addr, socklen_t* addr_len, int flags) {
  static const shardps::Accept4Function real =
      reinterpret_cast<shardps::Accept4Function>(dlsym(RTLD_NEXT, "accept4"));
  if (real == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  return shardps::GuardedAccept4(real, fd, addr, addr_len, flags);
}

// glibc's own close(), under the name it exports for this.
extern "C" int __close(int fd);

extern "C" int close(int fd) {
  shardps::ConnectionClosed(fd);
  return __close(fd);
}
