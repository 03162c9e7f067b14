"""The GPU path of the non-blocking operations, without a GPU: the C harness
tests/fuzz/gpu_requests.c drives the CUDA start and wait handlers with XLA
FFI call frames over a stand-in CUDA driver whose streams run their work in
order and only when forced (or all at once), and a stand-in MPI that reads
and writes buffers only when a request completes. A missing event, stream
wait or synchronisation, or a copy enqueued before MPI delivered, gives
wrong data there (see the harness's header). Built with the warnings as
errors and, where the compiler has them, AddressSanitizer and UBSan."""

import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CC = os.environ.get("CC", "cc")


def _ffi_include():
    import jax.ffi

    return jax.ffi.include_dir()


def _build(out, sanitize):
    sources = sorted(os.path.join(ROOT, "csrc", f)
                     for f in os.listdir(os.path.join(ROOT, "csrc"))
                     if f.endswith(".c"))
    cmd = [CC, "-std=c11", "-g", "-O1", "-Wall", "-Wextra", "-Werror",
           *(["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined",
              "-fno-omit-frame-pointer"] if sanitize else []),
           "-I", os.path.join(ROOT, "csrc"), "-I", _ffi_include(),
           os.path.join(ROOT, "tests", "fuzz", "gpu_requests.c"), *sources,
           "-ldl", "-lpthread", "-o", out]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


@pytest.mark.skipif(not shutil.which(CC) or CC == "false"
                    or bool(os.environ.get("JAXMPI_NO_COMPILER")),
                    reason="needs a C compiler")
def test_gpu_starts_and_waits_with_a_stand_in_driver(tmp_path):
    exe = str(tmp_path / "gpu_requests")
    built = _build(exe, sanitize=True)
    sanitized = built.returncode == 0
    if not sanitized:  # a compiler without the sanitizers' runtimes
        built = _build(exe, sanitize=False)
    assert built.returncode == 0, built.stderr[-4000:]
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)  # the ASan configuration preloads its runtime
    env["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=0"
    res = subprocess.run([exe], capture_output=True, text=True, timeout=600,
                         env=env)
    if "LeakSanitizer has encountered a fatal error" in res.stderr:
        # LSan cannot run here (e.g. under ptrace): the rest still checks.
        env["ASAN_OPTIONS"] = "detect_leaks=0"
        res = subprocess.run([exe], capture_output=True, text=True,
                             timeout=600, env=env)
    assert res.returncode == 0, (res.stdout[-2000:], res.stderr[-6000:])
    assert "checks passed" in res.stdout, res.stdout
    if sanitized:
        assert "ERROR: AddressSanitizer" not in res.stderr
