#!/usr/bin/env bash
# CI configuration "multihost": tests/multihost (simulated hosts in network
# namespaces, scripts/multihost.py) with both MPIs: the PyPI mpich wheel and
# Debian's Open MPI, launched by their own launchers and by Slurm (srun,
# sbatch; Debian's packages). Needs root (ip netns, unshare, apt-get).
#   scripts/ci_multihost.sh WORKDIR
# JAXMPI_MULTIHOST_LAYOUTS picks the suite layouts (default here
# mpich:2x2,openmpi:2x1: MPICH on two hosts of two ranks, shared memory
# within a host and TCP between them; Open MPI on two hosts of one).
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:?usage: scripts/ci_multihost.sh WORKDIR}
mkdir -p "$work"
. scripts/step_timing.sh
if [ "$(id -u)" != 0 ]; then
  echo "FAILED: the multihost configuration needs root (ip netns, unshare)"; exit 1
fi
missing=()
command -v iptables >/dev/null || missing+=(iptables)
command -v ip >/dev/null || missing+=(iproute2)
# Slurm (tests/multihost/test_slurm.py): controller, node daemon, clients,
# munge and the PMI plugins (mpi_pmi2, mpi_pmix); about 10 s to install.
for p in slurmctld slurmd slurm-client munge slurm-wlm-basic-plugins; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  step_begin
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  step_end "apt-get install ${missing[*]}"
fi
# Both environments must exist: a missing one would only skip its MPI.
JAXMPI_MPI=mpich JAXMPI_VENV="$work/venv-multihost" ./run setup
JAXMPI_MPI=system JAXMPI_VENV="$work/venv-multihost-openmpi" ./run setup
export JAXMPI_OPENMPI_VENV="$work/venv-multihost-openmpi"
export JAXMPI_MULTIHOST_LAYOUTS=${JAXMPI_MULTIHOST_LAYOUTS:-mpich:2x2,openmpi:2x1}
# 2 hosts x 2 ranks share 2 cores: MPICH's ranks yield while they wait, as
# in ./run (hydra forwards the launcher's environment to every host).
. scripts/mpich_yield.sh
echo "=== [$(date +%T)] tests/multihost (layouts $JAXMPI_MULTIHOST_LAYOUTS; mpich and Open MPI)"
out="$work/multihost-pytest.log"
set +e
step_begin
# (each test's seconds into JAXMPI_STEP_LOG: tests/plugins/jaxmpi_step_timing.py)
PYTHONPATH="$PWD/tests/plugins${PYTHONPATH:+:$PYTHONPATH}" JAXMPI_STEP_PER_TEST=1 \
  timeout -k 10 2400 "$work/venv-multihost/bin/python" -m pytest -q -rs --durations=25 tests/multihost \
  -p no:cacheprovider -p jaxmpi_step_timing --timeout-method=thread --timeout=1800 --color=no 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
step_end "tests/multihost" group
set -e
# A skip for a missing environment or for lack of root would hide an MPI.
if grep -E "^SKIPPED.*(venv|root|namespaces|Slurm)" "$out"; then
  echo "FAILED: an MPI, the namespaces or Slurm were skipped (above)"; exit 1
fi
exit "$rc"
