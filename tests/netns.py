"""Network namespaces on a bridge, made by a test itself: processes in
different namespaces talk over veth links as separate hosts would, and a
test can cut a namespace off, cut pairs, and drop packets at random
(issue 32's fault harness). This kernel has no netem: cuts between pairs
are iptables DROP rules inside a namespace, loss is iptables' `statistic`
match.

    net = netns.Net(3)           # ns 0..2, addresses net.addrs[i]
    argv = net.prefix(1) + [...]  # a command run inside namespace 1
    net.cut(1); net.heal(1)       # namespace 1 unreachable, then back
    net.block(0, 2); net.unblock(0, 2)  # 0 and 2 cannot talk; 1 reaches both
    net.loss(0, 0.1); net.loss(0, 0)    # 10% of what 0 receives dropped
    net.shape(0, 10**9)          # namespace 0's link: 1 Gbit/s each way
    net.close()

Needs root and a kernel that allows network namespaces; `unavailable()`
says why not, so that a test can skip with the reason (and
`unavailable(iptables=True)` whether the rules can be made too).
"""

import os
import random
import shutil
import subprocess

IP = shutil.which("ip") or "/usr/sbin/ip"
IPTABLES = shutil.which("iptables") or "/usr/sbin/iptables"
TC = shutil.which("tc") or "/usr/sbin/tc"


def _ip(*args):
    subprocess.run([IP] + list(args), check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE, universal_newlines=True)


def unavailable(iptables=False):
    """None when this process can make network namespaces (and, with
    `iptables`, DROP rules with the statistic match in them), else why
    not."""
    if os.geteuid() != 0:
        return "not root: network namespaces need CAP_SYS_ADMIN"
    if not os.path.exists(IP):
        return "no `ip` command (iproute2)"
    name = "spsprobe%d" % os.getpid()
    try:
        _ip("netns", "add", name)
        _ip("link", "add", name[:15], "type", "bridge")
        _ip("link", "del", name[:15])
        if iptables:
            if not os.path.exists(IPTABLES):
                return ("no `iptables` command (scripts/setup/setup.sh "
                        "installs it)")
            _ip("netns", "exec", name, IPTABLES, "-w", "-A", "INPUT", "-m",
                "statistic", "--mode", "random", "--probability", "0.5",
                "-j", "DROP")
    except subprocess.CalledProcessError as e:
        return "cannot make a network namespace, a bridge%s here: %s" % (
            " and iptables rules" if iptables else "",
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
        self._blocked = set()
        self._loss = {}
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

    def link(self, i):
        """The name of namespace i's network interface, inside it."""
        return self._links[i] + "n"

    def prefix(self, i):
        """The argv prefix that runs a command inside namespace i."""
        return [IP, "netns", "exec", self.names[i]]

    def cut(self, i):
        """Namespace i reaches nobody, and nobody reaches it (its link is
        down: packets are dropped, connections time out)."""
        _ip("link", "set", self._links[i], "down")

    def heal(self, i):
        _ip("link", "set", self._links[i], "up")

    def _rule(self, i, op, *rule):
        _ip("netns", "exec", self.names[i], IPTABLES, "-w", op, *rule)

    def block(self, i, j):
        """Namespaces i and j cannot reach each other (packets dropped both
        ways, inside i); each still reaches the others."""
        if (i, j) in self._blocked:
            return
        self._rule(i, "-A", "INPUT", "-s", self.addrs[j], "-j", "DROP")
        self._rule(i, "-A", "OUTPUT", "-d", self.addrs[j], "-j", "DROP")
        self._blocked.add((i, j))

    def unblock(self, i, j):
        if (i, j) not in self._blocked:
            return
        self._rule(i, "-D", "INPUT", "-s", self.addrs[j], "-j", "DROP")
        self._rule(i, "-D", "OUTPUT", "-d", self.addrs[j], "-j", "DROP")
        self._blocked.discard((i, j))

    def loss(self, i, p):
        """Namespace i drops each packet it receives with probability p
        (0: none). Applied to every namespace, each link loses p."""
        if i in self._loss:
            self._rule(i, "-D", "INPUT", "-m", "statistic", "--mode",
                       "random", "--probability", self._loss.pop(i), "-j",
                       "DROP")
        if p > 0:
            self._loss[i] = "%.4f" % p
            self._rule(i, "-A", "INPUT", "-m", "statistic", "--mode",
                       "random", "--probability", self._loss[i], "-j", "DROP")

    def shape(self, i, bits_per_s):
        """Namespace i's link carries at most `bits_per_s` each way (a
        token bucket, `tc tbf`, on both ends of its veth pair; this kernel
        has no netem), like a host's network card; None: unshaped."""
        ends = [([TC], self._links[i]),
                ([IP, "netns", "exec", self.names[i], TC], self.link(i))]
        for cmd, dev in ends:
            if bits_per_s is None:
                subprocess.run(cmd + ["qdisc", "del", "dev", dev, "root"],
                               stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
                continue
            # The bucket holds 10 ms of the rate (the kernel refills it at
            # timer ticks, 4 ms apart at HZ=250: a smaller one caps the
            # rate below what is asked), and at least two of the largest
            # (GSO) packets a veth hands over, 64 KiB, which tbf drops.
            burst = max(bits_per_s // 8 // 100, 128 * 1024)
            subprocess.run(cmd + ["qdisc", "replace", "dev", dev, "root", "tbf",
                                  "rate", "%dbit" % bits_per_s,
                                  "burst", str(burst), "latency", "50ms"],
                           check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE)

    def close(self):
        for kind, name in reversed(self._made):
            args = ["netns", "del", name] if kind == "netns" else [
                "link", "del", name]
            subprocess.run([IP] + args, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        self._made = []
