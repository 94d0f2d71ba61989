"""Network namespaces on a bridge, made by a test itself: processes in
different namespaces talk over veth links as separate hosts would, and a
test can cut a namespace off and heal it (issue 32's fault harness; loss,
delay and partitions between pairs are to come).

    net = netns.Net(3)           # ns 0..2, addresses net.addrs[i]
    argv = net.prefix(1) + [...]  # a command run inside namespace 1
    net.cut(1); net.heal(1)       # namespace 1 unreachable, then back
    net.close()

Needs root and a kernel that allows network namespaces; `unavailable()`
says why not, so that a test can skip with the reason.
"""

import os
import random
import shutil
import subprocess

IP = shutil.which("ip") or "/usr/sbin/ip"


def _ip(*args):
    subprocess.run([IP] + list(args), check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE, universal_newlines=True)


def unavailable():
    """None when this process can make network namespaces, else why not."""
    if os.geteuid() != 0:
        return "not root: network namespaces need CAP_SYS_ADMIN"
    if not os.path.exists(IP):
        return "no `ip` command (iproute2)"
    name = "spsprobe%d" % os.getpid()
    try:
        _ip("netns", "add", name)
        _ip("link", "add", name[:15], "type", "bridge")
        _ip("link", "del", name[:15])
    except subprocess.CalledProcessError as e:
        return "cannot make a network namespace and a bridge here: %s" % (
            (e.stderr or "").strip())
    finally:
        subprocess.run([IP, "netns", "del", name], stderr=subprocess.DEVNULL)
    return None


class Net(object):
    """`n` namespaces on one bridge, each with one veth link and address
    10.A.B.(i+1)/24 (A and B random, so that parallel tests do not meet).
    Names carry a random tag; close() removes everything."""

    def __init__(self, n):
        tag = "%05x" % random.getrandbits(20)
        self.bridge = "spsb" + tag
        self.names = ["sps%s-%d" % (tag, i) for i in range(n)]
        self._links = ["spsv%s%d" % (tag, i) for i in range(n)]
        subnet = "10.%d.%d" % (random.randint(64, 250), random.randint(1, 250))
        self.addrs = ["%s.%d" % (subnet, i + 1) for i in range(n)]
        self._made = []
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            self._made.append(("link", self.bridge))
            _ip("link", "set", self.bridge, "up")
            for i in range(n):
                self._add(i)
        except BaseException:
            self.close()
            raise

    def _add(self, i):
        ns, host = self.names[i], self._links[i]
        inside = host + "n"
        _ip("netns", "add", ns)
        self._made.append(("netns", ns))
        _ip("link", "add", host, "type", "veth", "peer", "name", inside)
        self._made.append(("link", host))
        _ip("link", "set", inside, "netns", ns)
        _ip("link", "set", host, "master", self.bridge, "up")
        _ip("-n", ns, "addr", "add", self.addrs[i] + "/24", "dev", inside)
        _ip("-n", ns, "link", "set", inside, "up")
        _ip("-n", ns, "link", "set", "lo", "up")

    def prefix(self, i):
        """The argv prefix that runs a command inside namespace i."""
        return [IP, "netns", "exec", self.names[i]]

    def cut(self, i):
        """Namespace i reaches nobody, and nobody reaches it (its link is
        down: packets are dropped, connections time out)."""
        _ip("link", "set", self._links[i], "down")

    def heal(self, i):
        _ip("link", "set", self._links[i], "up")

    def close(self):
        for kind, name in reversed(self._made):
            args = ["netns", "del", name] if kind == "netns" else [
                "link", "del", name]
            subprocess.run([IP] + args, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        self._made = []
