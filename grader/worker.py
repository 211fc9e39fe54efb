"""The process that runs student code. The judge (grader.harness) never does.

Started by grader.harness.Worker inside the sandbox (grader/sandbox.py) as `python worker.py FD`: this file and
wire.py are the only course files it can see, next to the submission's program. It talks over the socket FD in
plain data (wire.py: JSON and raw tensor bytes, never pickle), executes the student's program only inside this
process, so a crash, a hang, an illegal memory access or a monkey-patch costs nothing outside it, and sends back
raw outputs; the judge compares them with references it computed itself.

What this process measures about the student's code (kernels launched, forbidden torch calls, the largest
tensor, inputs changed in place) is measured in the same process as that code, so code that reaches into this
process could forge it; grader/README.md says which verdicts rest on these facts and how the judge guards them.
"""
import json
import os
import signal
import socket
import sys
import time
import traceback

try:
    from . import wire  # imported as grader.worker (tests, tools)
except ImportError:
    import wire  # run as a script in the sandbox, where only this file and wire.py are

# torch calls recorded during a graded call (each lesson decides which of them it forbids)
FORBIDDEN_WATCH = {
    "softmax", "log_softmax", "special_softmax", "_softmax", "softmin", "scaled_dot_product_attention",
    "_scaled_dot_product_attention_math", "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention", "_flash_attention_forward",
    "flex_attention", "multi_head_attention_forward",
    "matmul", "__matmul__", "__rmatmul__", "mm", "bmm", "einsum", "baddbmm", "addmm", "tensordot",
}
# the same work seen at the ATen level, where a call that bypasses torch functions (torch.ops.aten.mm) still shows
ATEN_WATCH = {"mm", "bmm", "addmm", "baddbmm", "addbmm", "mv", "addmv", "dot", "_softmax", "_log_softmax",
              "_safe_softmax", "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
              "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu",
              "_flash_attention_forward", "_efficient_attention_forward"}
EMPTY_FACTORIES = {"empty", "empty_like", "empty_strided", "new_empty"}
MAX_REQUEST_BYTES = 1 << 36


def _storage_bytes(tensor):
    """A copy of the bytes of a tensor's whole storage: the NaN around an input (the judge's frame) included, so a
    store past the end of an input shows as a change of that input."""
    import torch
    flat = torch.empty(0, dtype=torch.uint8, device=tensor.device).set_(tensor.untyped_storage())
    return flat.clone()


def _watchers():
    """A torch-function mode that records forbidden calls and poisons uninitialised outputs,
    and a dispatch mode that records the largest tensor any operation creates."""
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    class Watch(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.counts = {}  # (name, shapes) -> how many calls: a loop over tiles makes thousands of the same call
            self.framed = []  # (allocation, margin, shape): outputs allocated inside NaN, to catch stores past the end

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = getattr(func, "__name__", str(func))
            result = func(*args, **kwargs)
            if name in FORBIDDEN_WATCH:
                key = (name, tuple(tuple(a.shape) for a in args if isinstance(a, torch.Tensor)))
                self.counts[key] = self.counts.get(key, 0) + 1
            if name in EMPTY_FACTORIES and isinstance(result, torch.Tensor) and result.is_floating_point():
                with torch.no_grad():
                    result.fill_(float("nan"))  # poison: an element the kernel forgets to write shows as NaN
                    if result.is_contiguous() and result.numel() and not result.requires_grad:
                        # ...inside a NaN margin, checked after the call: a store past the end shows there
                        margin = -(-max(256, min(result.numel(), 1 << 20)) // 16) * 16  # keeps 16-byte alignment
                        allocation = torch.full((result.numel() + 2 * margin,), float("nan"), dtype=result.dtype,
                                                device=result.device)
                        result = allocation[margin:margin + result.numel()].view(result.shape)
                        self.framed.append((allocation, margin, list(result.shape)))
            return result

        def stores_past_end(self):
            """Shapes of the allocated tensors whose NaN margin was written: a store past the end (or the start)."""
            return [shape for allocation, margin, shape in self.framed
                    if not (torch.isnan(allocation[:margin]).all() and torch.isnan(allocation[-margin:]).all())]

    class Largest(TorchDispatchMode):
        def __init__(self, counts):
            super().__init__()
            self.numel, self.shape = 0, []
            self.counts = counts

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = getattr(getattr(func, "overloadpacket", None), "__name__", "")
            if name in ATEN_WATCH:
                key = ("aten." + name, tuple(tuple(a.shape) for a in args if isinstance(a, torch.Tensor)))
                self.counts[key] = self.counts.get(key, 0) + 1
            for t in (out if isinstance(out, (tuple, list)) else [out]):
                # floating-point only: Triton's autotuner allocates a 256 MB int32 buffer to flush the L2 cache
                if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() > self.numel:
                    self.numel, self.shape = t.numel(), list(t.shape)
            return out

    watch = Watch()
    return watch, Largest(watch.counts)


def _kernel_origin(kernel):
    """[name, file, first line] of the Python function behind a launched Triton kernel."""
    fn = kernel
    while hasattr(fn, "fn") and not hasattr(fn, "__code__"):
        fn = fn.fn
    code = getattr(fn, "__code__", None)
    name = getattr(kernel, "__name__", None) or getattr(fn, "__name__", "?")
    return [str(name), code.co_filename if code else "?", code.co_firstlineno if code else 0]


class MemoryGuard:
    """Bounds checking of the kernels that Triton's interpreter runs (a sanitizer, like triton-viz's, without its
    dependencies): while `active`, every element a load, store or atomic touches must be an element of one of the
    tensors the kernel was launched with. An access outside them, which a GPU may answer with an illegal memory
    access when the tensor ends at a page boundary, is recorded with the learner's line, and left out of the access
    (its mask made False there), so that the interpreter never reads or writes outside the tensors.

    Installed once per worker (Session.call(..., sanitize=True)); `tensors` are the arguments of the launch that runs
    now, as the interpreter's host copies."""

    def __init__(self, programs, language="en"):
        import numpy as np
        from triton.runtime import interpreter
        self.np, self.programs, self.language = np, programs, language
        self.active, self.tensors, self.kernel, self.found = False, [], "?", []
        guard = self
        original_args = interpreter.GridExecutor._init_args_hst

        def _init_args_hst(executor, args_dev, kwargs):
            args_hst, kwargs_hst = original_args(executor, args_dev, kwargs)
            if guard.active:
                names = list(inspect_parameters(executor.fn))
                guard.begin(getattr(executor.fn, "__name__", "?"),
                            list(zip(names, args_hst)) + list(kwargs_hst.items()))
            return args_hst, kwargs_hst
        interpreter.GridExecutor._init_args_hst = _init_args_hst

        builder = interpreter.InterpreterBuilder
        load, store, rmw = builder.create_masked_load, builder.create_masked_store, builder.create_atomic_rmw
        cas = builder.create_atomic_cas

        def create_masked_load(b, ptrs, mask, other, *rest):
            return load(b, ptrs, guard.safe(ptrs, mask, "load"), other, *rest)

        def create_masked_store(b, ptrs, value, mask, *rest):
            return store(b, ptrs, value, guard.safe(ptrs, mask, "store"), *rest)

        def create_atomic_rmw(b, op, ptr, val, mask, *rest):
            return rmw(b, op, ptr, val, guard.safe(ptr, mask, "atomic"), *rest)

        def create_atomic_cas(b, ptr, cmp, val, *rest):  # no mask: an access outside is recorded, then done anyway
            guard.safe(ptr, None, "atomic")
            return cas(b, ptr, cmp, val, *rest)
        self.hooks = {"create_masked_load": create_masked_load, "create_masked_store": create_masked_store,
                      "create_atomic_rmw": create_atomic_rmw, "create_atomic_cas": create_atomic_cas}
        for name, hook in self.hooks.items():
            setattr(builder, name, hook)
        self.executor_hook = _init_args_hst

    def intact(self):
        """Whether the hooks are still the ones installed (learner code that removes them is caught here too)."""
        from triton.runtime import interpreter
        return interpreter.GridExecutor._init_args_hst is self.executor_hook and all(
            getattr(interpreter.InterpreterBuilder, name) is hook for name, hook in self.hooks.items())

    def begin(self, kernel, named_args):
        import torch
        self.kernel, self.tensors = kernel, []

        def add(name, value):
            if isinstance(value, torch.Tensor) and value.numel():
                self.tensors.append((name, value.data_ptr(), value.element_size(), list(value.shape),
                                     list(value.stride())))
            elif isinstance(value, tuple):
                for i, v in enumerate(value):
                    add(f"{name}[{i}]", v)
            elif hasattr(value, "base") and isinstance(getattr(value, "base"), torch.Tensor):  # a TensorDescriptor
                add(name, value.base)
        for name, value in named_args:
            add(name, value)

    def _inside(self, addresses, tensor):
        """Which addresses are elements of `tensor` (its gaps, say between the rows of x[:, :d], are not)."""
        np = self.np
        _, base, size, shape, strides = tensor
        offset = addresses.astype(np.int64) - np.int64(base)
        dims = sorted(((n, s) for n, s in zip(shape, strides) if n > 1 and s > 0), key=lambda d: -d[1])
        extent = 1 + sum((n - 1) * s for n, s in dims)
        ok = (offset >= 0) & (offset < extent * size) & (offset % size == 0)
        element = offset // size
        nested = all(s > sum((m - 1) * t for m, t in dims[i + 1:]) for i, (n, s) in enumerate(dims))
        if nested:  # strides that nest (any view made by slicing): an element's index in each dimension is exact
            for n, s in dims:
                index = element // s
                ok &= index < n
                element = element - index * s
        return ok

    def safe(self, ptrs, mask, kind):
        """The access's mask with the elements outside every tensor turned off, each such access recorded."""
        if not self.active:
            return mask
        np = self.np
        from triton.runtime.interpreter import TensorHandle
        addresses = np.asarray(ptrs.data)
        if mask is None:
            on = np.ones(addresses.shape, dtype=bool)
        else:
            on = np.broadcast_to(np.asarray(mask.data if isinstance(mask, TensorHandle) else mask, dtype=bool),
                                 addresses.shape)
        inside = np.zeros(addresses.shape, dtype=bool)
        for tensor in self.tensors:
            inside |= self._inside(addresses, tensor)
        outside = on & ~inside
        if not outside.any():
            return mask
        self.record(kind, addresses, on, inside, outside)
        safe = on & inside
        return TensorHandle(safe, mask.dtype) if isinstance(mask, TensorHandle) else safe

    def record(self, kind, addresses, on, inside, outside):
        np = self.np
        frame, line = sys._getframe(), None
        while frame is not None:
            if frame.f_code.co_filename in self.programs:
                line = [frame.f_code.co_filename, frame.f_lineno]
                break
            frame = frame.f_back
        if any(f["kind"] == kind and f["line"] == line for f in self.found) or len(self.found) >= 8:
            return
        # the axes of the block along which only some of the positions accessed are outside, each as
        # [axis, its size, first, last]: e.g. rows 5..15 of 16 (a missing row mask), columns 12..15 (the head dim's)
        axes = []
        others = lambda axis: tuple(a for a in range(outside.ndim) if a != axis)
        for axis, n in enumerate(outside.shape):
            hit = np.nonzero(outside.any(axis=others(axis)))[0]
            if hit.size < int(on.any(axis=others(axis)).sum()):
                axes.append([axis, int(n), int(hit.min()), int(hit.max())])
        # the tensor this access is into: the one holding most of its elements inside, else the nearest below
        owner = None
        counts = [int((on & self._inside(addresses, t)).sum()) for t in self.tensors]
        if counts and max(counts) > 0:
            owner = self.tensors[counts.index(max(counts))]
        else:
            first = int(addresses[outside].flat[0])
            below = [t for t in self.tensors if t[1] <= first]
            owner = max(below, key=lambda t: t[1]) if below else None
        from triton.runtime.interpreter import interpreter_builder
        self.found.append({"kind": kind, "kernel": str(self.kernel), "line": line, "outside": int(outside.sum()),
                           "accessed": int(on.sum()), "axes": axes, "block": int(outside.ndim),
                           "program": [int(i) for i in interpreter_builder.grid_idx],
                           "tensor": [owner[0], owner[3]] if owner else None})

    def report(self):
        """The accesses recorded (plain data for the judge), each with its place in the learner's notebook."""
        found = []
        for f in self.found:
            f = dict(f)
            filename, lineno = f.pop("line") or (None, 0)
            code = ""
            if filename in self.programs:
                lines = self.programs[filename].split("\n")
                code = lines[lineno - 1].strip()[:160] if 0 < lineno <= len(lines) else ""
            f["where"] = cell_and_line(self.programs[filename], lineno, self.language) if filename in self.programs else ""
            f["code"] = code
            found.append(f)
        return found


def inspect_parameters(fn):
    import inspect
    return inspect.signature(fn).parameters


def _one_hardware_queue():
    """One hardware work queue per CUDA context (CUDA_DEVICE_MAX_CONNECTIONS=1) unless the instructor set another
    number; set before the driver is opened (cuInit), which reads it. A worker runs one check on one stream, so it
    loses nothing, and the driver makes such a context much faster, most of all when many start at once: on an H100
    with 12 to 48 forked workers starting together, 13.5 to 14.2 contexts a second against 4.7 to 6.2 with the
    driver's default of 8 queues, and their teardown a third as long (benchmarks/cuda_context_rate.py). A class
    starts hundreds of workers, and the driver makes their contexts one at a time."""
    os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")


def _blocking_sync():
    """Make this process sleep, not spin, while it waits for the GPU (CU_CTX_SCHED_BLOCKING_SYNC on the primary
    context, set before torch creates it). A class grades dozens of workers at once on one GPU; each would otherwise
    keep a core busy at every synchronize, cores that the other workers' Triton compiles need. FA_CUDA_SYNC=spin
    keeps CUDA's default (spin while fewer contexts than cores)."""
    if os.environ.get("FA_CUDA_SYNC", "blocking") != "blocking":
        return
    import ctypes
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        device = ctypes.c_int()
        set_flags = getattr(cuda, "cuDevicePrimaryCtxSetFlags_v2", None) or cuda.cuDevicePrimaryCtxSetFlags
        if cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(device), 0) == 0:
            set_flags(device, 0x04)  # CU_CTX_SCHED_BLOCKING_SYNC
    except (OSError, AttributeError):
        pass  # no driver library here: torch reports the missing GPU in its own words


class Session:
    def __init__(self, mode, language="en", notify=None):
        self.mode, self.language = mode, language
        self.device = "cuda" if mode == "gpu" else "cpu"
        self.namespaces = {}
        self.programs = {}
        self.launched = []
        self.guard = None  # MemoryGuard, installed at the first call that asks for it
        self._hook_kernel_launches()
        # On a GPU, Triton compiles a kernel at its first launch: seconds that are not the learner's run time. The
        # judge is told when each compile starts and ends, so that it takes only run time for a hang (harness.Worker).
        self.reports_compiles = mode == "gpu" and notify is not None and self._hook_compiles(notify)
        if self.device == "cuda":
            self._warm_up_gpu()

    @staticmethod
    def _hook_compiles(notify):
        try:
            from triton.runtime.jit import JITFunction
            original = JITFunction._do_compile
        except Exception:
            return False

        def _do_compile(self, *args, **kwargs):
            notify("compiling")
            try:
                return original(self, *args, **kwargs)
            finally:  # which kernel and which specialisation (args[0], Triton's key): FA_PROFILE counts the compiles
                notify("compiled", getattr(self, "__name__", "?"), str(args[0] if args else "")[:600])
        JITFunction._do_compile = _do_compile
        return True

    @staticmethod
    def _warm_up_gpu():
        """The CUDA context and Triton's driver helpers (a C module it builds on first use) before any call is timed."""
        import torch
        _one_hardware_queue()
        _blocking_sync()
        torch.cuda.init()
        torch.empty(1, device="cuda")
        try:
            from triton.runtime import driver
            driver.active.get_current_device()
        except Exception:
            pass

    def _hook_kernel_launches(self):
        # Record each Triton kernel launched, whether compiled or interpreted, with where it was defined.
        try:
            from triton.runtime.jit import JITFunction
            from triton.runtime.interpreter import InterpretedFunction
        except Exception:
            return
        launched = self.launched
        for cls in (JITFunction, InterpretedFunction):
            if "run" in vars(cls):
                original = cls.run

                def run(self, *args, __original=original, **kwargs):
                    launched.append(_kernel_origin(self))
                    return __original(self, *args, **kwargs)
                cls.run = run
            else:  # Triton <= 3.5's interpreter: `run` is set per kernel, and kernel[grid](...) goes by __getitem__
                original_init, original_getitem = cls.__init__, cls.__getitem__

                def __init__(self, *args, __original=original_init, **kwargs):
                    __original(self, *args, **kwargs)
                    run = self.run

                    def recorded(*args, **kwargs):  # an autotuner's or heuristics' launch
                        launched.append(_kernel_origin(self))
                        return run(*args, **kwargs)
                    self.run = recorded

                def __getitem__(self, grid, __original=original_getitem):
                    launched.append(_kernel_origin(self))
                    return __original(self, grid)
                cls.__init__, cls.__getitem__ = __init__, __getitem__

    def load(self, key, path):
        namespace = {"__name__": f"submission_{key}", "__file__": path}
        with open(path, encoding="utf-8") as f:
            self.programs[path] = f.read()
        code = compile(self.programs[path], path, "exec")
        started = time.time()
        exec(code, namespace)  # a real file, so Triton can read each kernel's source
        self.namespaces[key] = namespace
        return {"seconds": time.time() - started}

    def _function(self, key, name):
        fn = self.namespaces.get(key, {}).get(name)
        if fn is None:
            raise LookupError(f"`{name}` is not defined in the notebook")
        return fn

    def call(self, name, args, kwargs, key="student", backward=None, sanitize=False):
        """`name`(*args, **kwargs) (and its backward); with `sanitize`, every kernel the interpreter runs is
        bounds-checked (MemoryGuard): info["out_of_bounds"] lists the accesses outside the kernel's tensors."""
        import torch
        fn = self._function(key, name)
        if sanitize:
            if os.environ.get("TRITON_INTERPRET") != "1":
                raise RuntimeError("the memory check runs kernels in Triton's interpreter only")
            self.guard = self.guard or MemoryGuard(self.programs, self.language)
            self.guard.found, self.guard.active = [], True
        if backward is not None:
            for a in args:
                if isinstance(a, torch.Tensor) and a.is_floating_point():
                    a.requires_grad_(True)
        before = [_storage_bytes(a) if isinstance(a, torch.Tensor) else None for a in args]
        watch_mode, largest = _watchers()
        del self.launched[:]
        started = time.time()
        try:
            with largest, watch_mode:
                out = fn(*args, **kwargs)
            grads = None
            if backward is not None:
                with watch_mode:
                    torch.autograd.backward(out, backward)
                grads = [a.grad if isinstance(a, torch.Tensor) else None for a in args]
        finally:
            if self.guard:
                self.guard.active = False
        out_of_bounds = []
        if sanitize:
            out_of_bounds = self.guard.report() if self.guard.intact() else [{"removed": True}]
        if self.device == "cuda":
            torch.cuda.synchronize()
        seconds = time.time() - started
        modified = [i for i, (a, b) in enumerate(zip(args, before)) if b is not None
                    and not torch.equal(_storage_bytes(a), b)]
        launched = []
        for origin in self.launched:
            if origin not in launched:
                launched.append(origin)
        calls = [[name, [list(s) for s in shapes], n] for (name, shapes), n in watch_mode.counts.items()]
        info = {"launched": launched, "forbidden": calls, "largest_numel": largest.numel,
                "largest_shape": largest.shape, "inputs_modified": modified, "seconds": seconds,
                "stores_past_end": watch_mode.stores_past_end(), "out_of_bounds": out_of_bounds}
        return [out, grads, info]

    def _one_call(self, name, args, kwargs, key, backward):
        """A function that makes one call of `name` (and, with `backward`, its gradients): what warm and bench run."""
        import torch
        fn = self._function(key, name)
        if not backward:
            return lambda: fn(*args, **kwargs)
        args = [a.requires_grad_(True) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
        inputs = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
        grad = torch.randn_like(fn(*args, **kwargs))
        return lambda: torch.autograd.grad(fn(*args, **kwargs), inputs, grad)

    def warm(self, name, args, kwargs, key="student", backward=False):
        """One call of `name` (and its backward), untimed: Triton compiles and autotunes now, so that a timing later
        measures only the kernels (a speed check warms up beside the other checks and times once they are done)."""
        import torch
        self._one_call(name, args, kwargs, key, backward)()
        if self.device == "cuda":
            torch.cuda.synchronize()
        return None

    def bench(self, name, args, kwargs, key="student", backward=False, reps=None):
        """Median milliseconds of one call (forward, or forward+backward), timed on this device."""
        run = self._one_call(name, args, kwargs, key, backward)
        if self.device == "cuda":
            import triton.testing
            return float(triton.testing.do_bench(run, warmup=25, rep=reps or 100))
        times = []
        for _ in range(reps or 3):
            started = time.perf_counter()
            run()
            times.append((time.perf_counter() - started) * 1e3)
        return sorted(times)[len(times) // 2]

    def _compiled(self, kernel, signature, constexprs, capability, num_warps=4, num_stages=None, until="llir"):
        """The student's kernel compiled by Triton for a real GPU of this capability (no GPU needed), as far as the
        stage `until`: {"shared": bytes of shared memory, "asm": {stage: IR text}}."""
        import triton
        from triton.backends.compiler import GPUTarget
        fn = self._function("student", kernel)
        while not isinstance(fn, triton.runtime.jit.JITFunction) and hasattr(fn, "fn"):
            fn = fn.fn  # autotuner / heuristics wrapper
        if not isinstance(fn, triton.runtime.jit.JITFunction):
            raise TypeError(f"`{kernel}` is not a @triton.jit kernel")
        options = {"num_warps": num_warps}
        if num_stages:
            options["num_stages"] = num_stages
        source = triton.compiler.ASTSource(fn=fn, signature=signature, constexprs=constexprs)
        return compile_until(source, GPUTarget("cuda", capability, 32), options, until)

    def aot(self, kernel, signature, constexprs, capabilities, num_warps=4, num_stages=None):
        """Compile a kernel ahead of time for real GPUs; returns {capability: shared memory bytes}."""
        return {str(cc): int(self._compiled(kernel, signature, constexprs, cc, num_warps, num_stages)["shared"])
                for cc in capabilities}

    def ttir(self, kernel, signature, constexprs, capability=90, num_warps=4, num_stages=None):
        """The kernel's Triton IR (before any lowering to the GPU) as text: the judge reads in it, say, whether an
        offset is computed in 64-bit integers."""
        compiled = self._compiled(kernel, signature, constexprs, capability, num_warps, num_stages, until="ttir")
        return compiled["asm"]["ttir"]

    def where(self, filename, lineno):
        text = self.programs.get(filename)
        return None if text is None else cell_and_line(text, lineno, self.language)


class _CompileStopped(Exception):
    """Raised in place of the first stage after the last one a check reads (compile_until)."""


class _NoCache:
    """A cache manager that keeps nothing: a compile stopped half way must never be found as a whole one."""
    def __init__(self, key, override=False, dump=False):
        pass

    def get_file(self, filename):
        return None

    def put(self, data, filename, binary=True):
        return filename

    def get_group(self, filename):
        return None

    def put_group(self, filename, group):
        pass


def compile_until(source, target, options, until):
    """triton.compile of `source` for `target`, stopped after the stage `until` ("ttir", "ttgir" or "llir"):
    {"shared": shared memory in bytes (known from "llir" on), "asm": {stage: IR text}}. What the checks read is there
    by then; PTX and ptxas, about half of a compile's seconds, are skipped. Nothing is cached. A Triton without the
    stage hook (knobs.runtime.add_stages_inspection_hook, Triton 3.5+) compiles the whole kernel instead."""
    import triton
    knobs = getattr(triton, "knobs", None)
    if knobs is None or not hasattr(getattr(knobs, "runtime", None), "add_stages_inspection_hook"):
        compiled = triton.compile(source, target=target, options=options)
        text = {stage: ir for stage, ir in compiled.asm.items() if isinstance(ir, str)}
        return {"shared": compiled.metadata.shared, "asm": text}
    asm = {}

    def keep(stage, make):
        def run(module, metadata):
            module = make(module, metadata)
            asm[stage] = str(module)
            return module
        return run

    def stop(module, metadata):
        raise _CompileStopped(metadata)

    def truncate(backend, stages, options, language, capability):
        names = list(stages)
        last = names.index(until) if until in names else len(names) - 1
        for position, stage in enumerate(names):
            stages[stage] = keep(stage, stages[stage]) if position <= last else stop

    with knobs.runtime.scope(), knobs.cache.scope():
        knobs.runtime.add_stages_inspection_hook = truncate
        knobs.cache.manager_class = _NoCache
        try:
            triton.compile(source, target=target, options=options)
        except _CompileStopped as stopped:
            return {"shared": stopped.args[0].get("shared", 0), "asm": asm}
    raise RuntimeError(f"Triton compiled past the stage {until}")  # the hook was not called


# The worker's own words, in each edition's language (this file cannot import the grader's messages).
WORDS = {"en": {"cell": "cell {cell} (counting from the top, markdown cells included), line {line}",
                "named": "the {name} cell, line {line}", "line": "line {line}",
                "where": "in your notebook, {where}: {code}",
                "in_kernel": " (raised inside a kernel run by Triton's interpreter)"},
         "zh": {"cell": "从顶部数第 {cell} 个单元格（包括 markdown 单元格）第 {line} 行",
                "named": " {name} 单元格第 {line} 行", "line": "第 {line} 行", "where": "在你的笔记本{where}：{code}",
                "in_kernel": "（在 Triton 解释器运行的 kernel 里抛出）"}}


def cell_and_line(program, lineno, language="en"):
    """"the `name` cell, line L" (or "cell N …" for a cell without a graded name) for a line of a program made by
    grader.notebook.student_program (cells marked `# ── cell N [, locked] [`name`]`)."""
    words = WORDS.get(language, WORDS["en"])
    lines = program.split("\n")
    for i in range(min(lineno, len(lines)) - 1, -1, -1):
        if lines[i].startswith("# ── cell "):
            named = [w for w in lines[i].split() if w.startswith("`") and w.endswith("`")]
            if named:
                return words["named"].format(name=named[0], line=lineno - i - 1)
            return words["cell"].format(cell=lines[i].split()[3].rstrip(","), line=lineno - i - 1)
    return words["line"].format(line=lineno)


def compiled_line(error, session):
    """The learner's line that a Triton CompilationError points at. Compiling for a GPU raises it from the launch,
    so no frame of the traceback is in the kernel: the error carries the kernel's source (from its `def`) and the
    AST node, whose line counts from that `def`; find that source in the learner's program."""
    src, node = getattr(error, "src", None), getattr(error, "node", None)
    if not (session and isinstance(src, str) and src.strip() and isinstance(getattr(node, "lineno", None), int)):
        return None
    for filename, program in session.programs.items():
        start = program.find(src)
        if start >= 0 and 0 < node.lineno <= src.count("\n") + 1:
            lineno = program.count("\n", 0, start) + node.lineno
            return traceback.FrameSummary(filename, lineno, "", line=src.split("\n")[node.lineno - 1])
    return None


def describe(error, session):
    """The error and the last frames of it that are in the learner's own cells (not the grader's, not Triton's). An
    error inside a kernel run by the interpreter arrives as the cause of Triton's own error: its frames count too."""
    chain, seen = [], set()
    while error is not None and id(error) not in seen and len(chain) < 5:
        seen.add(id(error))
        chain.append(error)
        error = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
    frames = []
    for link in chain:
        frames += [f for f in traceback.extract_tb(link.__traceback__)
                   if session and f.filename in session.programs and (f.filename, f.lineno) not in
                   {(g.filename, g.lineno) for g in frames}]
    for f in filter(None, (compiled_line(link, session) for link in chain)):
        if (f.filename, f.lineno) not in {(g.filename, g.lineno) for g in frames}:
            frames.append(f)
    words = WORDS.get(session.language if session else "en", WORDS["en"])
    where = "".join("  " + words["where"].format(where=session.where(f.filename, f.lineno), code=(f.line or "").strip())
                    + "\n" for f in frames[-3:])
    main, note = chain[0], ""
    if type(main).__name__ == "InterpreterError" and len(chain) > 1:  # Triton's wrapper around the kernel's error
        main, note = chain[-1], words["in_kernel"]
    text = str(main).strip()
    if len(text) > 1500:
        text = text[:1500] + " …"
    return f"{type(main).__name__}: {text}{note}" + (f"\n{where.rstrip()}" if where else "")


def main(fd):
    channel = socket.socket(fileno=fd)
    os.environ.setdefault("FA_QUIET", "1")
    session = None
    while True:
        try:
            request = wire.decode(wire.recv_message(channel, MAX_REQUEST_BYTES),
                                  device=session.device if session else "cpu")
        except EOFError:
            return
        op = request.pop("op")
        try:
            if op == "start":
                session = Session(request["mode"], request.get("language", "en"),
                                  notify=lambda event, *about: wire.send_message(channel, wire.encode(
                                      {"progress": event, **({"kernel": about[0], "key": about[1]} if about else {})})))
                reply = {"ok": {"reports_compiles": session.reports_compiles}}
            elif op == "stop":
                wire.send_message(channel, wire.encode({"ok": None}))
                return
            else:
                reply = {"ok": getattr(session, op)(**request)}
        except BaseException as error:  # SystemExit from student code too: report it, keep serving
            try:
                reply = {"error": [type(error).__name__, describe(error, session)]}
            except Exception:  # an error whose str() raises, say: still a reply, never a dead worker
                reply = {"error": [type(error).__name__, type(error).__name__]}
        try:
            if "ok" in reply and op == "call":
                reply["ok"][0:2] = [_plain(reply["ok"][0]), _plain(reply["ok"][1])]
            message = wire.encode(reply)
        except BaseException as error:  # e.g. a tensor subclass whose methods raise
            message = wire.encode({"error": [type(error).__name__, f"could not send the result back: {error}"[:1500]]})
        wire.send_message(channel, message)
        sys.stdout.flush()
        sys.stderr.flush()


def _plain(value, depth=0):
    """Outputs detached and on the CPU (what the judge compares); anything else travels as wire.Foreign."""
    import torch
    if type(value) is torch.Tensor:
        return value.detach().cpu()
    if type(value) in (list, tuple) and depth < wire.MAX_DEPTH:
        return [_plain(v, depth + 1) for v in value]
    return value


def zygote(fd, mode):
    """`python worker.py FD --zygote MODE`: import torch and Triton once, then fork a fresh worker for each check
    (grader.processes.Zygote). It never loads student code itself and never touches CUDA (a CUDA context cannot cross
    a fork: each forked worker makes its own), so every forked worker starts as clean as a new process, without the
    seconds a new Python spends importing. Requests on FD are one JSON message each (a SOCK_SEQPACKET socket);
    "fork" carries the new worker's socket and log file as file descriptors."""
    steps = prepare_imports(mode)
    control = socket.socket(fileno=fd)
    control.send(json.dumps({"ready": os.getpid(), "steps": steps}).encode())
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, 1 << 16, 2)
        except OSError:
            return
        if not message:
            return  # the judge closed the socket
        request = json.loads(message)
        if request["op"] == "fork":
            channel, log = fds
            pid = os.fork()
            if pid == 0:  # the worker: its own session, so that a kill reaches whatever it starts
                code = 0
                try:
                    control.close()
                    os.setsid()
                    for key, value in request.get("env", {}).items():  # the worker's mode (sandbox.mode_variables)
                        os.environ.pop(key, None)
                        if value is not None:
                            os.environ[key] = value
                    os.dup2(log, 1)
                    os.dup2(log, 2)
                    os.close(log)
                    main(channel)
                except BaseException:
                    traceback.print_exc()
                    code = 1
                finally:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os._exit(code)
            os.close(channel)
            os.close(log)
            reply = {"pid": pid}
        elif request["op"] == "kill":
            try:
                os.killpg(request["pid"], signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            reply = {}
        elif request["op"] == "usage":  # CPU seconds of the zygote and of the workers it has reaped (FA_PROFILE)
            import resource
            own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
            reply = {"self": own.ru_utime + own.ru_stime, "workers": children.ru_utime + children.ru_stime}
        elif request["op"] == "wait":  # the worker's exit code (-N: killed by signal N), or None while it runs
            reply = {"code": _reap(request["pid"])}
        else:
            reply = {"error": f"unknown request {request['op']!r}"}
        control.send(json.dumps(reply).encode())


def prepare_imports(mode):
    """Everything a worker's first call would import or build, done once in the zygote: torch and Triton, the watch
    modes of Session.call (which import torch._dynamo: seconds), and on a GPU machine Triton's compiler and its
    driver helpers (a C module it builds on first use) loaded without initialising CUDA, which each forked worker
    does for itself. Returns the seconds of each step ({step: seconds}: what FA_PROFILE records of a zygote)."""
    steps, began = {}, time.monotonic()
    try:  # from the process's start (exec) to here: python and what worker.py imports at its top (torch, via wire)
        ticks = int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19])
        steps["python, worker.py's imports"] = round(
            float(open("/proc/uptime").read().split()[0]) - ticks / os.sysconf("SC_CLK_TCK"), 3)
    except (OSError, ValueError, IndexError):
        pass

    def step(name):
        nonlocal began
        now = time.monotonic()
        steps[name] = round(now - began, 3)
        began = now

    import torch
    step("torch (the rest)")
    try:
        import triton.language  # noqa: F401
        from triton.runtime import interpreter  # noqa: F401
    except Exception:
        pass
    step("triton")
    watch, largest = _watchers()
    with largest, watch:
        torch.ones(2).softmax(0)
    step("watch modes (torch._dynamo)")
    if mode == "gpu":
        try:
            import triton.compiler  # noqa: F401
            import triton.testing  # noqa: F401
            from triton.backends.nvidia import compiler, driver  # noqa: F401
            step("triton compiler")
            driver.CudaUtils()  # built (or read from the cache) and loaded here, once; no CUDA call
            driver.CudaUtils.__init__ = lambda self: None  # a singleton: a forked worker keeps the loaded module
            step("driver helpers (C compiler)")
        except Exception:
            pass  # a worker builds them itself, as a new process does
    if torch.cuda.is_initialized():  # a fork could not use CUDA: refuse to be a zygote (the judge starts new processes)
        raise RuntimeError("CUDA was initialised while preparing the zygote")
    return steps


def _reap(pid):
    """At once, never waiting: this process serves one request at a time, and every fork would queue behind a wait
    (the judge polls instead: processes.Forked._code)."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return -signal.SIGKILL  # reaped already: it can only have been killed
    return os.waitstatus_to_exitcode(status) if done else None


if __name__ == "__main__":
    if sys.argv[2:3] == ["--zygote"]:
        zygote(int(sys.argv[1]), sys.argv[3])
    else:
        main(int(sys.argv[1]))
