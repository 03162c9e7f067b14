"""mpi4jax 0.7's import path: ``from mpi4jax.experimental import notoken``
becomes ``from jaxmpi.experimental import notoken``.

``jaxmpi.experimental.notoken`` is ``jaxmpi.notoken`` itself (the same
module object), whose operations return bare results.
"""

import sys as _sys

from .. import notoken

# `import jaxmpi.experimental.notoken` finds the module here.
_sys.modules[__name__ + ".notoken"] = notoken

__all__ = ["notoken"]
