# Sourced by ./run and scripts/ci_multihost.sh (bash): MPICH's ranks give
# their core away while they wait in MPI, as Open MPI's do with
# mpi_yield_when_idle. A rank that waits sleeps briefly after 100 polls
# instead of spinning through its time slice; with more ranks than cores a
# spinning rank holds the core its peer needs: test_collectives.py and
# test_p2p.py took 74 s at 4 ranks on 2 cores and 58 s with this, 59 and
# 42 s at 3 ranks, the same 19 s at 2 ranks. Settings already in the
# environment win.
export MPIR_CVAR_ENABLE_HEAVY_YIELD=${MPIR_CVAR_ENABLE_HEAVY_YIELD:-1}
export MPIR_CVAR_POLLS_BEFORE_YIELD=${MPIR_CVAR_POLLS_BEFORE_YIELD:-100}
