#ifndef SHARDPS_COMMON_LAUNCH_ACCEPT_GUARD_H_
#define SHARDPS_COMMON_LAUNCH_ACCEPT_GUARD_H_

#include <sys/socket.h>

#include <cstdint>

namespace shardps {

// Keeps a server accepting connections after a flood of them has used up
// its open files. gRPC 1.51 stops listening for good when accept4() fails
// with EMFILE (it logs "Failed accept4: Too many open files" and closes the
// listener: gRPC issues #16058, #20418), so 1,100 idle connections to a
// pserver under a 1,024 limit left it unable to take any trainer again,
// though it was back to 8 open files a few seconds later.
//
// With the guard on, the process's accept4() (every listener's: gRPC's,
// the TCP lane's) keeps `reserve` descriptors free: a connection whose
// descriptor would be among the last `reserve` of the open-file limit is
// accepted and closed at once (the client sees its connection reset and
// retries), and an accept4() that fails with EMFILE or ENFILE frees a spare
// descriptor it holds for the purpose, accepts that connection, closes it
// and takes the spare back (the technique of libev's and nginx's accept
// loops). Neither ever reaches the caller as an error: a non-blocking
// listener sees EAGAIN once its backlog is drained, a blocking one EAGAIN
// after each connection shed. The connections a flood leaves open are
// closed by the server's handshake timeout (pserver: 10 s).
//
// The pserver binary routes accept4() here (pserver/accept4_guard.cc);
// other processes are unaffected until they call EnableAcceptGuard.

// Turns the guard on with `reserve` descriptors kept free below the current
// soft RLIMIT_NOFILE (call after raising it), and opens the spare. Returns
// the highest descriptor number a connection may have (the cap), or -1 if
// the limit could not be read. Calling it again resets the cap.
int EnableAcceptGuard(int reserve);

// Connections accepted and closed at once so far (for logs and metrics).
int64_t ConnectionsShed();

using Accept4Function = int (*)(int, sockaddr*, socklen_t*, int);

// accept4() through the guard, calling `real` for the system's. What the
// guard does with it is described above; off, it is `real` itself.
int GuardedAccept4(Accept4Function real, int listen_fd, sockaddr* addr,
                   socklen_t* addr_len, int flags);

// Turns the guard off and closes the spare (tests).
void DisableAcceptGuard();

// With the guard on, at most `max` connections accepted through it from
// one IP address are open at once: one more from that address is accepted
// and closed at once, as the guard sheds (so a flood from one host cannot
// take every descriptor from the others). 0: no cap. The process must
// tell of every close (ConnectionClosed): the pserver binary routes its
// close() there.
void SetConnectionsPerAddress(int max);

// `fd` is about to be closed: if it is a connection counted against its
// address, the count goes down. Cheap for any other descriptor.
void ConnectionClosed(int fd);

// Connections open now from the address of connection `fd` (tests).
int ConnectionsFromAddressOf(int fd);

}  // namespace shardps

#endif  // SHARDPS_COMMON_LAUNCH_ACCEPT_GUARD_H_
