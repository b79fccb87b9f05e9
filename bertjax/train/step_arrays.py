"""Every array of a saved Orbax item read once through TensorStore's synchronous API: how a step
saved without a file manifest (`bertjax.train.manifest`) is checked before Orbax opens it.

Orbax reads a step's arrays concurrently on its own asyncio event loop; when one read fails, the
loop is closed while TensorStore still has reads in flight, and each of them reports into the
closed loop ("RuntimeError: Event loop is closed", one traceback per read, after bertjax has
long moved on). Read here one array at a time, with no event loop, a missing or cut file fails
at once, as an exception, and nothing is left running: the damaged step never reaches Orbax.

This reads Orbax's array layout (zarr arrays, or an OCDBT database) through TensorStore's public
API. Should a later Orbax store arrays otherwise, it finds none to read and checks nothing, and
the step is read by Orbax as before: a damaged one is still refused, only less quietly.
"""

from __future__ import annotations

from pathlib import Path

import tensorstore as ts

# array metadata files: zarr (v2) and zarr3, as Orbax writes them
_DRIVERS = {".zarray": "zarr", "zarr.json": "zarr3"}


def read_every_array(item_dir: Path) -> int:
    """Read every array stored under `item_dir` (an OCDBT database, or one directory per array)
    in full; the first that cannot be read raises TensorStore's error (a ValueError). Returns how
    many were read."""
    base = {"driver": "file", "path": str(item_dir.absolute()) + "/"}
    if (item_dir / "manifest.ocdbt").is_file():
        base = {"driver": "ocdbt", "base": f"file://{item_dir.absolute()}/"}
    keys = [key.decode() for key in ts.KvStore.open(base).result().list().result()]
    arrays = sorted((key.rpartition("/")[0], driver) for key in keys
                    for name, driver in _DRIVERS.items() if key.rpartition("/")[2] == name)
    for path, driver in arrays:
        spec = {"driver": driver, "kvstore": {**base, "path": base.get("path", "") + path + "/"}}
        ts.open(spec, open=True).result().read().result()
    return len(arrays)
