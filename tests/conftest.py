"""Every test process: the library's user cache (encodings of `locus evaluate`, encoder weights) in a temporary
folder, so tests never read or fill the developer's ~/.cache/locus."""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("LOCUS_CACHE_DIR", tempfile.mkdtemp(prefix="locus-cache-"))
