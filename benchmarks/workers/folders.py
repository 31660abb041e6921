"""Where the checkpoint job writes: a new folder for every save, as `checkpoint_<n>` saves have."""

from __future__ import annotations

import shutil
from pathlib import Path


class Folders:
    """A new folder for every save; only the newest of each kind is kept.

    Every contender writes new files: on a VM, writing a new file can cost twice as much as
    overwriting one (the page cache needs fresh memory), and an atomic save can never overwrite in
    place. The job runs `os.sync` (untimed) before every timed call, so that the disk writing back
    one contender's files does not slow down the next.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.count = 0

    def new(self, kind: str) -> Path:
        self.count += 1
        return self.root / f"{kind}_{self.count:03d}"

    def newest(self, kind: str) -> Path:
        return sorted(self.root.glob(f"{kind}_*"))[-1]

    def keep_newest(self) -> None:
        for kind in {path.name.rsplit("_", 1)[0] for path in self.root.iterdir()}:
            for old in sorted(self.root.glob(f"{kind}_*"))[:-1]:
                shutil.rmtree(old)
