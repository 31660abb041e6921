"""The lock on a checkpoint folder, so that saves and loads of one folder take turns.

The main process holds an exclusive lock (`fcntl.flock` on `.<name>.lock` next to the folder) from
the start of a save to its rename, and while a load reads: two jobs saving into one folder take
turns, and a load never sees a folder being replaced.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from pathlib import Path

_LOCK_SUFFIX = ".lock"
# What flock raises on a file system that cannot lock: saves and loads there go ahead unlocked.
_NO_LOCKING = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL, errno.EBADF}


class FolderLock:
    """An exclusive lock on a checkpoint folder: flock on `.<name>.lock` beside it (main process).

    `release` deletes the lock file while still holding it; a process that locked the deleted file
    meanwhile sees that the path now names another file (or none), and locks again.
    """

    def __init__(self, folder: Path) -> None:
        self.path = folder.parent / f".{folder.name}{_LOCK_SUFFIX}"
        self._fd: int | None = None

    def acquire(self) -> None:
        """Wait until this process holds the lock (unlocked where the file system cannot lock).

        Raises OSError when the lock file cannot be created.
        """
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                locked = os.fstat(fd)
                with contextlib.suppress(FileNotFoundError):
                    current = os.stat(self.path)
                    if (current.st_ino, current.st_dev) == (locked.st_ino, locked.st_dev):
                        self._fd = fd
                        return
            except OSError as error:
                os.close(fd)
                if error.errno not in _NO_LOCKING:
                    raise
                with contextlib.suppress(OSError):
                    os.unlink(self.path)
                return
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)  # the file was deleted by its holder's release: lock the new one

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
        finally:
            os.close(self._fd)
            self._fd = None
