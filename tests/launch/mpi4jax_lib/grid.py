"""A non-periodic 2-D decomposition of an ny x nx field: walls at the
domain's edges, where a block's neighbour is MPI.PROC_NULL."""

from mpi4py import MPI


class Grid:
    def __init__(self, ny, nx, comm=MPI.COMM_WORLD):
        self.comm = comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.py, self.px = MPI.Compute_dims(self.size, 2)
        assert ny % self.py == 0 and nx % self.px == 0, (ny, nx, self.py, self.px)
        self.ny, self.nx = ny, nx
        self.by, self.bx = ny // self.py, nx // self.px
        self.iy, self.ix = self.position(self.rank)
        self.north = self.at(self.iy - 1, self.ix)
        self.south = self.at(self.iy + 1, self.ix)
        self.west = self.at(self.iy, self.ix - 1)
        self.east = self.at(self.iy, self.ix + 1)

    def position(self, rank):
        return divmod(rank, self.px)

    def at(self, iy, ix):
        if 0 <= iy < self.py and 0 <= ix < self.px:
            return iy * self.px + ix
        return MPI.PROC_NULL

    def rows(self, rank=None):
        iy, _ = self.position(self.rank if rank is None else rank)
        return slice(iy * self.by, (iy + 1) * self.by)

    def cols(self, rank=None):
        _, ix = self.position(self.rank if rank is None else rank)
        return slice(ix * self.bx, (ix + 1) * self.bx)
