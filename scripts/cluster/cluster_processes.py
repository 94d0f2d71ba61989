"""Processes of a local ShardPS cluster, for scripts/cluster/local_cluster.py:
the children (pservers and trainers) in process groups of their own that die
with this script, their logs, the lines of theirs worth showing, and how their
exit statuses are described.

Standard library only; Python 3.6 or newer.
"""

import ctypes
import os
import re
import signal
import subprocess
import sys
import threading
import time

PROG = "local_cluster"

# A glog line of severity WARNING, ERROR or FATAL ("W20261121 23:41:29.4 ..."
# or, from older glog, "W1121 23:41:29.4 ..."), a one-line refusal such as
# "trainer: --mode=x: must be sync or async" or gflags' "ERROR: ...", or a
# last word from the C++ runtime ("free(): invalid pointer", "terminate
# called ...", "*** SIGSEGV ...").
NOTEWORTHY = re.compile(r"^(?:[WEF]\d{4}(?:\d{4})? \d\d:|(?:pserver|trainer): |"
                        r"ERROR: |\*\*\* |terminate called|\w+\(\): )")

_print_lock = threading.Lock()
_stderr_at_line_start = [True]  # False while trainer 0 is mid-line (\r bars)


def _emit(line):
    """Writes a whole line to stderr, after ending a line (a progress bar)
    that trainer 0 left open."""
    with _print_lock:
        try:
            if not _stderr_at_line_start[0]:
                sys.stderr.write("\n")
                _stderr_at_line_start[0] = True
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass


def end_open_line():
    """Ends a line that trainer 0 left open (a progress bar) before other
    output."""
    with _print_lock:
        if not _stderr_at_line_start[0]:
            sys.stderr.write("\n")
            _stderr_at_line_start[0] = True
        sys.stderr.flush()


def say(msg):
    """A message of this script."""
    _emit("%s: %s" % (PROG, msg))


def echo(prefix, line):
    """A line of a child's log."""
    _emit("%s %s" % (prefix, line))


class UsageError(Exception):
    """Bad arguments: exit 2."""


class ClusterError(Exception):
    """The job cannot go on: kill everything, exit with `code`."""

    def __init__(self, msg, code=1, reason=None):
        Exception.__init__(self, msg)
        self.code = code
        self.reason = reason or msg.split("\n")[0]


class Interrupted(Exception):
    def __init__(self, signum):
        Exception.__init__(self, signal.Signals(signum).name)
        self.signum = signum


def describe_status(rc):
    if rc is None:
        return "running"
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = "signal %d" % -rc
        return "killed by %s" % name
    return "exit %d" % rc


def describe_exit(rc):
    """describe_status() as a verb phrase, for messages."""
    if rc is not None and rc >= 0:
        return "exited with status %d" % rc
    return "was " + describe_status(rc) if rc is not None else "is running"


def exit_code_of(rc):
    """A shell-style exit code: 128+n for a child killed by signal n."""
    return 128 - rc if rc < 0 else rc


def tail_lines(path, n=5):
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 8192))
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    lines = [l.rstrip("\r") for l in data.replace("\r", "\n").splitlines()]
    return [l for l in lines if l.strip()][-n:]


def _pdeathsig_setter():
    """A preexec_fn making the child die with this process (Linux only)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()
    pr_set_pdeathsig = 1
    sigkill = int(signal.SIGKILL)

    def preexec():
        prctl(pr_set_pdeathsig, sigkill, 0, 0, 0)
        # The parent may have died between fork and prctl.
        if os.getppid() != parent:
            os._exit(1)

    return preexec


class Child(object):
    """A started pserver or trainer, in its own process group."""

    def __init__(self, kind, index, argv, log_path, stream_to_terminal=False):
        self.kind = kind
        self.index = index
        self.name = "%s %d" % (kind, index)
        self.argv = argv
        self.log_path = log_path
        self.returncode = None
        self.ended = None  # time.monotonic() when reaped
        self.reader = None
        self._log_offset = 0  # for echoing warnings from the log file
        self._partial = b""
        self.echoed = 0  # lines shown by echo_new_warnings
        self.quiet = False  # streamed output kept off the terminal
        self.silent = False  # True: echo_new_warnings shows nothing
        self._log = open(log_path, "wb")
        preexec = _pdeathsig_setter()
        kwargs = dict(stdin=subprocess.DEVNULL, start_new_session=True,
                      preexec_fn=preexec, close_fds=True)
        try:
            if stream_to_terminal:
                self.popen = subprocess.Popen(argv, stdout=subprocess.PIPE,
                                              stderr=subprocess.STDOUT,
                                              **kwargs)
            else:
                self.popen = subprocess.Popen(argv, stdout=self._log,
                                              stderr=subprocess.STDOUT,
                                              **kwargs)
        except OSError as e:
            self._log.close()
            raise ClusterError("cannot start %s (%s): %s" %
                               (self.name, argv[0], e))
        self.pid = self.popen.pid
        self.started = time.monotonic()
        self.streamed = stream_to_terminal

    def start_streaming(self, quiet):
        """Copies the child's output to its log and (unless quiet) stderr."""
        if not self.streamed:
            return
        self.quiet = quiet

        def pump():
            fd = self.popen.stdout.fileno()
            while True:
                try:
                    data = os.read(fd, 65536)
                except OSError:
                    break
                if not data:
                    break
                self._log.write(data)
                self._log.flush()
                if quiet:
                    continue
                with _print_lock:
                    try:
                        sys.stderr.flush()
                        sys.stderr.buffer.write(data)
                        sys.stderr.buffer.flush()
                        _stderr_at_line_start[0] = data.endswith(b"\n")
                    except (OSError, ValueError, AttributeError):
                        pass

        self.reader = threading.Thread(target=pump, name="pump-" + self.name)
        self.reader.daemon = True
        self.reader.start()

    def poll(self):
        if self.returncode is None:
            rc = self.popen.poll()
            if rc is not None:
                self.returncode = rc
                self.ended = time.monotonic()
        return self.returncode

    def running(self):
        return self.poll() is None

    def signal_group(self, sig):
        """Sends `sig` to the child's process group (the child and anything
        it started)."""
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def wait(self, timeout):
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        return self.poll()

    def echo_new_warnings(self):
        """Shows new WARNING/ERROR lines of a child that logs to a file."""
        if self.streamed or self.silent:
            return
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._log_offset)
                data = f.read(1 << 20)
        except OSError:
            return
        if not data:
            return
        self._log_offset += len(data)
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()
        for raw in lines:
            line = raw.decode("utf-8", "replace").rstrip("\r")
            if NOTEWORTHY.match(line):
                echo("[%s]" % self.name, line)
                self.echoed += 1

    def last_words(self, n=5):
        """The end of the log, for a message about this child's exit, unless
        the terminal shows it already."""
        if self.streamed:
            return format_tail(self.log_path, n) if self.quiet else ""
        self.echo_new_warnings()
        if self.echoed:
            return ""
        return format_tail(self.log_path, n)

    def finish_output(self, timeout=5.0):
        if self.reader is not None:
            self.reader.join(timeout)
        if self.popen.stdout is not None:
            self.popen.stdout.close()
        self.echo_new_warnings()
        self._partial = b""
        try:
            self._log.close()
        except OSError:
            pass


def format_tail(path, n=5):
    lines = tail_lines(path, n)
    if not lines:
        return " (empty)"
    return ":\n" + "\n".join("    " + l for l in lines)


def find_binary(bin_dir, name):
    """bin_dir/name/name (a CMake build tree) or bin_dir/name (installed)."""
    for path in (os.path.join(bin_dir, name, name),
                 os.path.join(bin_dir, name),
                 os.path.join(bin_dir, "bin", name)):
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise UsageError(
        "no %s binary under --bin_dir=%s (looked for %s/%s/%s and %s/%s); "
        "build it with: cmake --build %s -j2 --target pserver trainer" %
        (name, bin_dir, bin_dir, name, name, bin_dir, name, bin_dir))


def split_at_dashes(argv):
    """(the script's own arguments, those after `--` for the trainers)."""
    if "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1:]
    return argv, []


def flag_in(args, name):
    """(index, value) of the last --name[=value] in args, or (None, None).
    A value given as the next argument is returned too."""
    found = (None, None)
    pattern = re.compile(r"^--?%s(?:=(.*))?$" % re.escape(name), re.S)
    for i, a in enumerate(args):
        if a == "--":
            break
        m = pattern.match(a)
        if m:
            if m.group(1) is not None:
                found = (i, m.group(1))
            elif i + 1 < len(args) and not args[i + 1].startswith("-"):
                found = (i, args[i + 1])
            else:
                found = (i, "")
    return found
