"""The Triton cache of a submission's workers (TRITON_CACHE_MANAGER=triton_cache:SubmissionCache, set by
grader/sandbox.py for every worker that runs student code). Lives beside worker.py in the sandbox, read-only there.

All the checks of one submission share its cache, and no other submission and no reference worker ever sees it:
- a compiled kernel (its IR, PTX, cubin and metadata), which runs on the GPU;
- a kernel signature's launcher, the Python extension module that Triton builds with the C compiler (about half a
  second) and loads into the worker that launches a kernel of that signature. Shared, because every check of a
  submission would otherwise build again each one it launches. A launcher one check built can be loaded by another
  check of the same submission, and that gives the submission nothing it lacks: a worker that launches kernels
  runs the submission's own code, which can load any native code it likes (ctypes).
Triton's driver helpers, the other extension modules it builds, stay in the process that built them: the zygote
(grader/processes.py) loads them before it forks, and it runs no student code, so it must never load a module
that a worker could have written.

The checks run side by side, so when two of them need the same kernel or launcher, the second waits for the first to
build it (a lock file per cache entry) instead of building it again.
"""
import fcntl
import os
import tempfile

from triton.runtime.cache import FileCacheManager

LAUNCHER = "__triton_launcher"  # the module name Triton's launchers are built under (driver.CudaLauncher)
_PRIVATE = {}  # pid -> this process's folder for the other native modules (a fork gets a new one)


def _native(filename):
    return filename.endswith(".so")  # an extension module: EXT_SUFFIX ends so on Linux


def _private(filename):
    return _native(filename) and not filename.startswith(LAUNCHER)


def _private_dir():
    pid = os.getpid()
    if pid not in _PRIVATE:
        _PRIVATE[pid] = tempfile.mkdtemp(prefix=f"triton-native-{pid}-")
    return _PRIVATE[pid]


class SubmissionCache(FileCacheManager):
    def __init__(self, key, override=False, dump=False):
        super().__init__(key, override, dump)
        self.shared_dir = self.cache_dir
        self.building = None  # the lock file held while this process builds the entry of this key

    def _make_path(self, filename):
        if _private(filename):
            folder = os.path.join(_private_dir(), self.key)
            os.makedirs(folder, exist_ok=True)
            return os.path.join(folder, filename)
        return os.path.join(self.shared_dir, filename)

    def _found_or_claimed(self, look):
        """look() (the entry's files), or None when this process must build the entry: then it holds the entry's
        lock until it puts what it built, and any other worker that looks for the same entry waits for it here."""
        found = look()
        if found is not None or self.building is not None:
            return found
        lock = open(os.path.join(self.shared_dir, "building.lock"), "w")
        fcntl.flock(lock, fcntl.LOCK_EX)  # released by the put, or when this process ends (a failed build)
        found = look()
        if found is not None:  # built by another worker while this one waited
            lock.close()
            return found
        self.building = lock
        return None

    def _built(self):
        if self.building is not None:
            self.building.close()
            self.building = None

    def get_group(self, filename):
        """A kernel's files (Triton asks for them before it compiles the kernel)."""
        return self._found_or_claimed(lambda: super(SubmissionCache, self).get_group(filename))

    def put_group(self, filename, group):
        try:
            return super().put_group(filename, group)
        finally:
            self._built()

    def get_file(self, filename):
        """A launcher is asked for by name before Triton builds it, and then put: the same lock covers it. A kernel's
        own files are asked for one by one while its group is read, and a private module is this process's: no lock."""
        if not _native(filename) or _private(filename):
            return super().get_file(filename)
        return self._found_or_claimed(lambda: super(SubmissionCache, self).get_file(filename))

    def put(self, data, filename, binary=True):
        if _private(filename):
            path = self._make_path(filename)
            with open(path, "wb" if isinstance(data, bytes) else "w") as f:
                f.write(data)
            return path
        try:
            return super().put(data, filename, binary)
        finally:
            if _native(filename):
                self._built()
