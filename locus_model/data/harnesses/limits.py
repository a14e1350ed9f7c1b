"""The bounds of a read moved to :mod:`locus_model.data.limits` (they bound every reader now, not only the harness
readers); these names stay until locus_pipeline/intake imports from there, then this module goes."""

from locus_model.data.limits import DropLimits as ReadLimits  # noqa: F401
from locus_model.data.limits import bounded, budget  # noqa: F401
