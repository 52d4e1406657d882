"""CRC-32C (Castagnoli), the checksum of v2 record batches and KRaft snapshots.

``crc32c(data, value=0)`` is the function of the ``crc32c`` package (SSE4.2 /
ARMv8 hardware instructions where the CPU has them), loaded without running the
package's ``__init__``: that calls ``importlib.metadata.version("crc32c")``,
which imports ``email``, ``zipfile`` and friends and scans ``sys.path`` --
about 25 ms of start-up for every ``txn-audit dump``, more than the CRC of a
100 MB file. The extension module itself is what ``crc32c.crc32c`` is; if it
cannot be found that way (another layout, a future release), the package is
imported as usual.
"""

from __future__ import annotations

import os
import sys
from typing import Callable


def _load() -> Callable[..., int]:
    pkg = sys.modules.get("crc32c")
    if pkg is not None:
        return pkg.crc32c
    try:
        import importlib.machinery
        import importlib.util

        spec = importlib.util.find_spec("crc32c")  # locates the package without executing it
        for d in (spec.submodule_search_locations or []) if spec is not None else []:
            for suffix in importlib.machinery.EXTENSION_SUFFIXES:
                path = os.path.join(d, "_crc32c" + suffix)
                if os.path.isfile(path):
                    loader = importlib.machinery.ExtensionFileLoader("crc32c._crc32c", path)
                    ext_spec = importlib.util.spec_from_file_location("crc32c._crc32c", path, loader=loader)
                    if ext_spec is None:
                        continue
                    module = importlib.util.module_from_spec(ext_spec)
                    loader.exec_module(module)
                    fn = module.crc32c
                    if fn(b"123456789") == 0xE3069283:  # the check value of CRC-32C
                        return fn
    except Exception:  # pragma: no cover - any surprise: the documented import
        pass
    import crc32c as pkg  # pragma: no cover

    return pkg.crc32c  # pragma: no cover


crc32c = _load()
