"""The seed documents' examples run unchanged but for the import."""

import re


def test_allreduce_example_prints_sixes(mpirun):
    job = mpirun(4, "examples/seed_allreduce.py")
    assert job.returncode == 0, job
    numbers = re.findall(r"[-\d.]+", job.stdout)
    assert numbers == ["6."] * 9, job


def test_send_recv_example_swaps(mpirun):
    job = mpirun(2, "examples/seed_send_recv.py")
    assert job.returncode == 0, job
    lines = job.stdout
    r0 = lines[lines.index("r0 |"):].split("r1 |")[0]
    r1 = lines[lines.index("r1 |"):].split("r0 |")[0]
    assert re.findall(r"[-\d.]+", r0.split("|", 1)[1]) == ["1."] * 9, job
    assert re.findall(r"[-\d.]+", r1.split("|", 1)[1]) == ["0."] * 9, job
