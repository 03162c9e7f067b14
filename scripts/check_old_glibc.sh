#!/usr/bin/env bash
# The release wheel on an older glibc than the build machine's: a Debian 11
# (bullseye, glibc 2.31) chroot made with debootstrap, a CPython built there
# from Debian's source package (bullseye's own Python 3.9 is below jaxmpi's
# floor), the wheel installed with pip as a user would (pip picks the
# jax/jaxlib, mpi4py, MPICH and NumPy wheels that glibc 2.31 takes), then
# examples/seed_allreduce.py at 2 ranks. Not part of CI (about 30 minutes,
# most of it building Python); run it before a release. Needs root,
# debootstrap (apt-get install debootstrap) and deb.debian.org and PyPI.
#
#   scripts/check_old_glibc.sh WHEEL [CHROOT]       default CHROOT: build/bullseye
#
# Steps already done in CHROOT (the system, the Python) are kept.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEEL=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
ROOT=$(mkdir -p "${2:-build/bullseye}" && cd "${2:-build/bullseye}" && pwd)
PYVER=3.11.2  # bookworm's python3.11 source, served by deb.debian.org
log() { printf '\n=== [%s] %s\n' "$(date +%T)" "$*"; }

if [ ! -x "$ROOT/usr/bin/gcc" ]; then
  log "debootstrap bullseye into $ROOT"
  debootstrap --variant=minbase --include=build-essential,libssl-dev,zlib1g-dev,libffi-dev,libbz2-dev,liblzma-dev,libsqlite3-dev,ca-certificates,curl \
    bullseye "$ROOT" http://deb.debian.org/debian
fi
# This machine's DNS and certificate authorities (a proxy's, if any).
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
cp /etc/ssl/certs/ca-certificates.crt "$ROOT/etc/ssl/certs/ca-certificates.crt"
for fs in proc sys dev dev/shm; do
  mountpoint -q "$ROOT/$fs" || mount --bind "/$fs" "$ROOT/$fs"
done
trap 'for fs in dev/shm dev sys proc; do umount "$ROOT/$fs" 2>/dev/null || true; done' EXIT

if [ ! -x "$ROOT/opt/py/bin/python3" ]; then
  log "CPython $PYVER from Debian's source package, built in the chroot"
  curl -fsS -o "$ROOT/root/python.tgz" \
    "http://deb.debian.org/debian/pool/main/p/python3.11/python3.11_$PYVER.orig.tar.gz"
  chroot "$ROOT" /bin/bash -ec "cd /root && rm -rf Python-$PYVER && tar xzf python.tgz &&
    cd Python-$PYVER && ./configure --prefix=/opt/py > configure.log 2>&1 &&
    make -j$(nproc) > make.log 2>&1 && make install > install.log 2>&1"
fi

log "the wheel and its dependencies into a fresh venv, by pip"
mkdir -p "$ROOT/root/w"
rm -f "$ROOT"/root/w/*.whl
cp "$WHEEL" examples/seed_allreduce.py scripts/glibc_needs.py "$ROOT/root/w/"
# A clean environment but for the certificates copied in above (pip's own
# bundle would lack a proxy's).
chroot "$ROOT" env -i PATH=/usr/bin:/bin HOME=/root PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
  SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt /bin/bash -ec "
  echo \"\$(ldd --version | head -1)\"
  rm -rf /opt/venv && /opt/py/bin/python3 -m venv /opt/venv
  /opt/venv/bin/pip install -q --disable-pip-version-check '/root/w/$(basename "$WHEEL")[mpich]'
  /opt/venv/bin/pip list --disable-pip-version-check 2>/dev/null | grep -iE '^(jax|jaxlib|jaxmpi|mpi4py|mpich|numpy) '
  /opt/venv/bin/python /root/w/glibc_needs.py --max \$(ldd --version | head -1 | grep -o '2\.[0-9]*\$') \
    /opt/venv/lib/python3*/site-packages/jaxmpi/_core_*.so
  cd /root/w && JAX_PLATFORMS=cpu timeout 600 /opt/venv/bin/mpiexec -n 2 /opt/venv/bin/python seed_allreduce.py | tee seed.out
  # rank 0 prints allreduce(zeros + rank) over ranks 0 and 1: a 3 x 3 array of ones.
  /opt/venv/bin/python -c \"import sys; t = open('seed.out').read(); sys.exit(t.count('1.') != 9 or '[' not in t)\"
"
log "the wheel works on glibc 2.31: seed_allreduce.py at 2 ranks gave the expected array"
