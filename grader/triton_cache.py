"""The Triton cache of a submission's workers (TRITON_CACHE_MANAGER=triton_cache:SubmissionCache, set by
grader/sandbox.py for every worker that runs student code). Lives beside worker.py in the sandbox, read-only there.

- A compiled kernel (its IR, PTX, cubin and metadata) goes to the submission's own cache, which all the checks of that
  submission share: the checks run side by side, and when two of them need the same kernel the second waits for the
  first's compile (a lock file per kernel) instead of compiling it again. What is there is the submission's own code,
  compiled; it runs on the GPU, never in the judge, and no other submission and no reference worker ever sees it.
- A Python extension module that Triton builds with the C compiler (its driver helpers, a launcher per kernel
  signature) is loaded into the worker as native code, so one check must never load one that another check could have
  written: each worker builds its own, in a folder of its own, and keeps it to itself.
"""
import fcntl
import os
import tempfile

from triton.runtime.cache import FileCacheManager

_PRIVATE = {}  # pid -> this process's folder for native modules (a fork gets a new one)


def _private_dir():
    pid = os.getpid()
    if pid not in _PRIVATE:
        _PRIVATE[pid] = tempfile.mkdtemp(prefix=f"triton-native-{pid}-")
    return _PRIVATE[pid]


class SubmissionCache(FileCacheManager):
    def __init__(self, key, override=False, dump=False):
        super().__init__(key, override, dump)
        self.shared_dir = self.cache_dir
        self.compiling = None  # the lock file held while this process compiles the kernel of this key

    def _native(self, filename):
        return filename.endswith(".so")  # an extension module: EXT_SUFFIX ends so on Linux

    def _make_path(self, filename):
        if self._native(filename):
            folder = os.path.join(_private_dir(), self.key)
            os.makedirs(folder, exist_ok=True)
            return os.path.join(folder, filename)
        return os.path.join(self.shared_dir, filename)

    def put(self, data, filename, binary=True):
        if not self._native(filename):
            return super().put(data, filename, binary)
        path = self._make_path(filename)
        with open(path, "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
        return path

    def get_group(self, filename):
        """A kernel's files, or None when this process must compile it: then it holds the kernel's lock until its
        put_group, and any other worker asking for the same kernel waits for it here."""
        group = super().get_group(filename)
        if group is not None or self.compiling is not None:
            return group
        lock = open(os.path.join(self.shared_dir, "compiling.lock"), "w")
        fcntl.flock(lock, fcntl.LOCK_EX)  # released by put_group, or when this process ends (a failed compile)
        group = super().get_group(filename)
        if group is not None:  # compiled by another worker while this one waited
            lock.close()
            return group
        self.compiling = lock
        return None

    def put_group(self, filename, group):
        try:
            return super().put_group(filename, group)
        finally:
            if self.compiling is not None:
                self.compiling.close()
                self.compiling = None
