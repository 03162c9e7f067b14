"""The simulated hosts themselves (scripts/multihost.py): isolated, named,
and always torn down: after an exception, a timeout, SIGTERM, SIGINT, and,
for a run killed outright, by the next run's stale-namespace sweep."""

import os
import signal
import subprocess
import sys
import time

import pytest

from hostsetup import ROOT, multihost

SCRIPT = os.path.join(ROOT, "scripts", "multihost.py")

pytestmark = pytest.mark.skipif(multihost.can_run() is not None,
                                reason=str(multihost.can_run()))


def namespaces_of(pid):
    return [ns for ns in multihost._netns_list() if ns.startswith(f"jmh-{pid}-")]


def etc_entries_of(pid):
    d = multihost.ETC_NETNS
    return [e for e in os.listdir(d) if e.startswith(f"jmh-{pid}-")] if os.path.isdir(d) else []


def in_host(c, i, *argv):
    return subprocess.run(c.in_host(i, list(argv)), capture_output=True, text=True, timeout=30)


def transfer(c, src, dst, nbytes):
    """nbytes over TCP from host src to host dst (by name)."""
    srv = subprocess.Popen(c.in_host(dst, [sys.executable, "-c", (
        "import socket; s = socket.create_server(('0.0.0.0', 5556)); c, a = s.accept(); "
        "n = 0\nwhile True:\n b = c.recv(1 << 16)\n if not b: break\n n += len(b)\n"
        "print(n)")]), stdout=subprocess.PIPE, text=True)
    try:
        for _ in range(100):  # until it listens
            r = in_host(c, src, sys.executable, "-c", (
                f"import os, socket; c = socket.create_connection(('jmh{dst}', 5556), timeout=5); "
                f"c.sendall(os.urandom({nbytes})); c.close()"))
            if r.returncode == 0:
                break
            time.sleep(0.1)
        assert r.returncode == 0, r
        assert int(srv.communicate(timeout=30)[0]) == nbytes
    finally:
        srv.kill()
        srv.wait()


def test_hosts_are_named_isolated_and_reach_each_other():
    with multihost.Cluster(3) as c:
        for h in c.hosts:
            r = in_host(c, h.index, "hostname")
            assert r.stdout.strip() == h.name, r
            r = in_host(c, h.index, "getent", "hosts", "jmh3")
            assert r.stdout.split()[0] == "192.0.2.3", r
            # One route, to the bridge's subnet: nothing else is reachable.
            r = in_host(c, h.index, "ip", "-4", "route")
            assert r.stdout.split() == ["192.0.2.0/24", "dev", "eth0", "proto", "kernel",
                                        "scope", "link", "src", h.addr], r
        # A TCP connection from host 1 to a listener in host 3 (by name), and
        # none from host 1 to anything outside 192.0.2.0/24.
        srv = subprocess.Popen(c.in_host(3, [sys.executable, "-c", (
            "import socket; s = socket.create_server(('192.0.2.3', 5555)); "
            "c, a = s.accept(); c.sendall(a[0].encode())")]), stdout=subprocess.PIPE)
        try:
            for _ in range(100):  # until it listens
                r = in_host(c, 1, sys.executable, "-c", (
                    "import socket; c = socket.create_connection(('jmh3', 5555), timeout=5); "
                    "print(c.recv(100).decode())"))
                if r.returncode == 0:
                    break
                time.sleep(0.1)
            assert r.stdout.strip() == "192.0.2.1", r
        finally:
            srv.kill()
            srv.wait()
        r = in_host(c, 1, sys.executable, "-c", (
            "import socket\n"
            "try:\n socket.create_connection(('198.51.100.1', 80), timeout=5)\n"
            "except OSError as e:\n print(e.errno, e.strerror)"))
        assert "Network is unreachable" in r.stdout, r
        # The root namespace got no interface.
        root = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
        assert "jmh" not in root and " p1@" not in root, root
        names = [h.ns for h in c.hosts] + [c.switch]
    assert not set(names) & set(multihost._netns_list())
    assert not etc_entries_of(os.getpid())


def test_two_runs_at_once_do_not_collide():
    with multihost.Cluster(2) as a, multihost.Cluster(2) as b:
        assert not {h.ns for h in a.hosts} & {h.ns for h in b.hosts}
        # Each sees its own host 2 (same address, different namespace).
        ia = in_host(a, 2, "readlink", "/proc/self/ns/net").stdout
        ib = in_host(b, 2, "readlink", "/proc/self/ns/net").stdout
        assert ia != ib
        # 4 MB from a's host 2 to a's host 1 show on a's links, not on b's.
        ba, bb = a.counters(), b.counters()
        transfer(a, 2, 1, 4 << 20)
        aa, ab = a.counters(), b.counters()
        assert aa[1]["rx"] - ba[1]["rx"] >= 4 << 20
        assert aa[2]["tx"] - ba[2]["tx"] >= 4 << 20
        assert all(ab[i][d] - bb[i][d] < 1 << 16 for i in (1, 2) for d in ("rx", "tx"))
    assert not namespaces_of(os.getpid())


def test_teardown_after_an_exception_kills_what_runs_in_the_hosts():
    with pytest.raises(RuntimeError, match="boom"):
        with multihost.Cluster(2) as c:
            sleeper = subprocess.Popen(c.in_host(2, ["sleep", "300"]))
            for _ in range(50):
                if c.pids(2):
                    break
                time.sleep(0.1)
            assert c.pids(2)
            raise RuntimeError("boom")
    assert sleeper.wait(timeout=10) == -signal.SIGKILL
    assert not namespaces_of(os.getpid()) and not etc_entries_of(os.getpid())


def start_run(*args):
    """scripts/multihost.py run ... in a process of its own; returns it once
    its hosts exist (and the launched `sleep` runs in host 2)."""
    p = subprocess.Popen([sys.executable, SCRIPT, "run", "--hosts", "2", *args,
                          "--", "sleep", "300"], cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        host2 = [ns for ns in namespaces_of(p.pid) if ns.endswith("-h2")]
        if host2 and multihost._netns_pids(host2[0]):
            return p
        assert p.poll() is None, p.communicate()
        time.sleep(0.1)
    p.kill()
    pytest.fail("the run's hosts did not come up in 60 s")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_teardown_on_a_signal(sig):
    p = start_run()
    left = namespaces_of(p.pid)
    assert len(left) == 3  # 2 hosts and the switch
    sleepers = [pid for ns in left for pid in multihost._netns_pids(ns)]
    t0 = time.monotonic()
    p.send_signal(sig)
    out, err = p.communicate(timeout=30)
    assert time.monotonic() - t0 < 15, err
    assert p.returncode != 0
    assert not namespaces_of(p.pid) and not etc_entries_of(p.pid), err
    for pid in sleepers:
        assert not os.path.exists(f"/proc/{pid}") or "zombie" in open(
            f"/proc/{pid}/status").read().lower(), pid


def test_teardown_on_timeout():
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, SCRIPT, "run", "--hosts", "2", "--timeout", "3",
                        "--", "sleep", "300"], cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 124, r
    assert "timed out" in r.stderr, r
    assert time.monotonic() - t0 < 30
    assert not [ns for ns in multihost._netns_list() if ns.startswith("jmh-")
                and multihost.NAME_RE.match(ns) and not multihost._pid_alive(
                    int(multihost.NAME_RE.match(ns).group(1)))]


def test_run_caps_every_hosts_egress():
    # `run --tbf`: each rank (one per host) sees a token bucket at the rate
    # asked on its host's eth0, the hosts of another run none.
    show = ["tc", "qdisc", "show", "dev", "eth0"]
    capped = subprocess.run([sys.executable, SCRIPT, "run", "--hosts", "2", "--tbf", "10mbit",
                             "--", *show], cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    plain = subprocess.run([sys.executable, SCRIPT, "run", "--hosts", "2", "--", *show],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert capped.returncode == 0 and plain.returncode == 0, (capped, plain)
    assert capped.stdout.count("qdisc tbf") == 2, capped.stdout
    assert "rate 10Mbit" in capped.stdout, capped.stdout
    assert "tbf" not in plain.stdout, plain.stdout


def test_a_run_killed_outright_is_swept_by_the_next():
    p = start_run()
    p.kill()  # SIGKILL: no teardown at all
    p.wait()
    stale = namespaces_of(p.pid)
    assert len(stale) == 3
    sleepers = [pid for ns in stale for pid in multihost._netns_pids(ns)]
    assert sleepers
    with multihost.Cluster(1) as live:
        # The sweep at start removed the dead run's hosts and processes ...
        assert not namespaces_of(p.pid) and not etc_entries_of(p.pid)
        for pid in sleepers:
            assert not os.path.exists(f"/proc/{pid}") or "zombie" in open(
                f"/proc/{pid}/status").read().lower()
        # ... and a sweep leaves the namespaces of a live run alone.
        multihost.cleanup_stale()
        assert live.hosts[0].ns in multihost._netns_list()
    r = subprocess.run([sys.executable, SCRIPT, "cleanup"], capture_output=True, text=True)
    assert r.returncode == 0, r
