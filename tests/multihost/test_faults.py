"""Faults across hosts, 2 hosts x 1 rank, a jitted allreduce loop
(fault_job.py) running when the fault hits host 2:

  killed rank   SIGKILL to the rank's process: the job must end with a
                non-zero status within 60 s (MPI and its launcher notice
                the closed connections).
  killed host   host 2's link goes down, then every process in it is
                SIGKILLed (a power cut: no FIN reaches host 1). No MPI
                notices a peer that vanishes without closing its sockets;
                jaxmpi's watchdog (JAXMPI_TIMEOUT=10) does: the waiting rank
                raises, aborts, and the job must end non-zero within 60 s.
  slow link     host 2's egress capped to 100 Mbit/s with tbf: the job
                completes with exact results, its allreduces slower.
  lossy link    1 % of host 2's outgoing packets dropped (iptables
                statistic): the job completes with exact results.

Each case prints its outcome and the detection time (fault to launcher
exit) as `fault: ...` lines (pytest -s shows them).
"""

import os
import re
import shutil
import subprocess
import time

import pytest

from hostsetup import RANK_ENV, multihost

WAIT_READY = 180  # s for both ranks to start and compile (a loaded machine)
BOUND = 60  # s from the fault to the end of the job


def start_job(c, mpi, tmp_path, seconds, count=8, env=None, via="mpiexec"):
    ready = tmp_path / "ready"
    ready.mkdir(parents=True)
    full_env = dict(RANK_ENV)
    full_env.update(env or {})
    job = c.start(["python", "tests/multihost/fault_job.py", str(count), str(seconds),
                   str(ready)], mpi, ranks_per_host=1, env=full_env,
                  cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                      os.path.abspath(__file__)))), via=via)
    deadline = time.monotonic() + WAIT_READY
    while len(os.listdir(ready)) < 2:
        if job.proc.poll() is not None or time.monotonic() > deadline:
            res = job.wait(5)
            pytest.fail(f"the job did not start: {res!r}")
        time.sleep(0.05)
    return job


def rank_pids(c, host):
    pids = []
    for pid in c.pids(host):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if any(a.endswith(b"fault_job.py") for a in argv) and b"python" in argv[0]:
            pids.append(pid)
    return pids


def report(mpi, case, res, t_fault):
    took = res.ended - t_fault
    print(f"\nfault: {mpi.kind} {case}: rc {res.returncode} after {took:.2f} s"
          f"{' (timed out)' if res.timed_out else ''}; left behind {res.left_behind}")
    tail = (res.stdout + res.stderr).strip().splitlines()[-6:]
    print("fault:   " + "\nfault:   ".join(tail))
    return took


@pytest.mark.parametrize("via", ["mpiexec", "srun"])
def test_killed_rank(cluster, mpi, tmp_path, via):
    # via srun: Slurm on the hosts (test_slurm.py), srun -K1 ends the step.
    if via == "srun" and multihost.slurm_missing():
        pytest.skip(multihost.slurm_missing())
    c = cluster(2)
    if via == "srun":
        c.start_slurm()
    job = start_job(c, mpi, tmp_path, seconds=300, via=via)
    victims = rank_pids(c, 2)
    assert len(victims) == 1, victims
    os.kill(victims[0], 9)
    t_fault = time.monotonic()
    res = job.wait(BOUND + 30)
    took = report(mpi, "killed rank" + (" (srun -K1)" if via == "srun" else ""), res,
                  t_fault)
    assert not res.timed_out and res.returncode != 0, res
    assert took < BOUND, res


def test_killed_host(cluster, mpi, tmp_path):
    c = cluster(2)
    env = {"JAXMPI_TIMEOUT": "10"}
    if mpi.kind == "openmpi":
        # mpirun's daemons talk over TCP; without keepalive probes (default
        # 300 s idle, then 9 probes 20 s apart) mpirun hangs for minutes on
        # a daemon that vanished, even after a rank called MPI_Abort.
        env.update(OMPI_MCA_oob_tcp_keepalive_time="2", OMPI_MCA_oob_tcp_keepalive_intvl="1",
                   OMPI_MCA_oob_tcp_keepalive_probes="3")
    job = start_job(c, mpi, tmp_path, seconds=300, env=env)
    # Power cut: the link first, so that no FIN or RST reaches host 1.
    subprocess.run(["ip", "-n", c.host(2).ns, "link", "set", "eth0", "down"], check=True)
    t_fault = time.monotonic()
    c.kill_host(2)
    res = job.wait(BOUND + 30)
    took = report(mpi, "killed host (JAXMPI_TIMEOUT=10)", res, t_fault)
    assert not res.timed_out and res.returncode != 0, res
    assert took < BOUND, res
    out = res.stdout + res.stderr
    if mpi.kind == "openmpi":
        # mpirun's keepalive notices first (about 5 s)
        assert "ORTE has lost communication with a remote daemon" in out, res
    else:
        # MPICH notices nothing: jaxmpi's watchdog ends the job.
        assert "timed out after 10 s (JAXMPI_TIMEOUT)" in out, res


def finished_ok(res, n=2):
    # (hydra and mpirun may join two ranks' lines)
    done = [m.group(0).split() for m in re.finditer(r"done \d+ \d+ [\d.]+", res.stdout)]
    return res.returncode == 0 and sorted(int(d[1]) for d in done) == list(range(n)), done


def test_slow_link(cluster, mpi, tmp_path):
    c = cluster(2)
    count = 1 << 17  # 1 MiB of float64
    base = start_job(c, mpi, tmp_path / "a", seconds=3, count=count).wait(BOUND + 60)
    ok, done = finished_ok(base)
    assert ok, base
    fast = base.seconds / max(int(d[2]) for d in done)
    c.cap_egress(2, "100mbit")
    res = start_job(c, mpi, tmp_path / "b", seconds=3, count=count).wait(BOUND + 60)
    ok, done = finished_ok(res)
    assert ok, res
    iters = max(int(d[2]) for d in done)
    # Host 2 sent at most 100 Mbit/s (plus the 64 kB bucket): the cap held.
    tx = res.eth0(2)["tx"]
    assert tx <= 100e6 / 8 * res.seconds + 65536, (tx, res.seconds)
    # ... and at least the allreduce's share of each iteration (1 MiB).
    assert tx >= iters * 8 * count, (tx, iters)
    print(f"\nfault: {mpi.kind} slow link (tbf 100mbit): {iters} allreduces of 1 MiB, "
          f"{res.seconds / iters * 1e3:.1f} ms each (job time / iterations) against "
          f"{fast * 1e3:.1f} ms unthrottled; exact results")


@pytest.mark.skipif(shutil.which("iptables") is None, reason="needs iptables")
def test_lossy_link(cluster, mpi, tmp_path):
    c = cluster(2)
    rule = ["OUTPUT", "-o", "eth0", "-m", "statistic", "--mode", "random",
            "--probability", "0.01", "-j", "DROP"]
    subprocess.run(["ip", "netns", "exec", c.host(2).ns, "iptables", "-A", *rule], check=True)
    res = start_job(c, mpi, tmp_path, seconds=3, count=1 << 14).wait(BOUND + 60)
    ok, done = finished_ok(res)
    assert ok, res
    counters = subprocess.run(["ip", "netns", "exec", c.host(2).ns, "iptables", "-L", "OUTPUT",
                               "-v", "-x", "-n"], capture_output=True, text=True).stdout
    dropped = int(counters.splitlines()[2].split()[0])
    assert dropped > 0, counters
    print(f"\nfault: {mpi.kind} lossy link (1 %): {dropped} packets dropped, "
          f"slowest allreduce {max(float(d[3]) for d in done):.0f} ms; exact results")
