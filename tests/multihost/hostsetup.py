"""What the multi-host tests share (a module of its own: `conftest` is an
ambiguous name when several test folders are collected together)."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import multihost  # noqa: E402,F401

# What every rank gets (the ./run settings).
RANK_ENV = {"JAX_PLATFORMS": "cpu",
            "XLA_FLAGS": "--xla_force_host_platform_device_count=1",
            "PYTHONUNBUFFERED": "1"}
