"""The process that runs student code. The judge (grader.harness) never does.

Started by grader.harness.Worker as `python -m grader.worker FD`; it talks over the socket FD in
pickled messages and executes the student's program only inside this process, so a crash, a hang, an
illegal memory access or a monkey-patch costs nothing outside it. It returns raw outputs; the judge
compares them with references it computed itself.
"""
import os
import pickle
import sys
import time
import traceback
from multiprocessing.connection import Connection

# torch calls recorded during a graded call (each lesson decides which of them it forbids)
FORBIDDEN_WATCH = {
    "softmax", "log_softmax", "special_softmax", "_softmax", "softmin", "scaled_dot_product_attention",
    "_scaled_dot_product_attention_math", "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention", "_flash_attention_forward",
    "matmul", "__matmul__", "__rmatmul__", "mm", "bmm", "einsum", "baddbmm", "addmm", "tensordot",
}
EMPTY_FACTORIES = {"empty", "empty_like", "empty_strided", "new_empty"}


def _to_device(value, device):
    import torch
    if isinstance(value, torch.Tensor):
        if value.device.type == device:
            return value
        if value.is_contiguous():
            return value.to(device)
        # A view with gaps (x[:, :n]) would become contiguous on copy: copy its storage, keep its strides.
        flat = torch.empty(0, dtype=value.dtype).set_(value.untyped_storage())
        return flat.to(device).as_strided(value.shape, value.stride(), value.storage_offset())
    if isinstance(value, (list, tuple)):
        return type(value)(_to_device(v, device) for v in value)
    return value


def _to_cpu(value):
    import torch
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, (list, tuple)):
        return type(value)(_to_cpu(v) for v in value)
    return value


def _same_bits(a, b):
    """Bit-for-bit equality (NaN == NaN), for any strides."""
    import torch
    a, b = a.detach().contiguous(), b.detach().contiguous()
    if a.dtype == torch.bool:
        return torch.equal(a, b)
    return torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def _watchers():
    """A torch-function mode that records forbidden calls and poisons uninitialised outputs,
    and a dispatch mode that records the largest tensor any operation creates."""
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    class Watch(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.calls = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = getattr(func, "__name__", str(func))
            result = func(*args, **kwargs)
            if name in FORBIDDEN_WATCH:
                shapes = [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)]
                self.calls.append((name, shapes))
            if name in EMPTY_FACTORIES and isinstance(result, torch.Tensor) and result.is_floating_point():
                with torch.no_grad():
                    result.fill_(float("nan"))  # poison: an element the kernel forgets to write shows as NaN
            return result

    class Largest(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.numel, self.shape = 0, ()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in (out if isinstance(out, (tuple, list)) else [out]):
                # floating-point only: Triton's autotuner allocates a 256 MB int32 buffer to flush the L2 cache
                if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() > self.numel:
                    self.numel, self.shape = t.numel(), tuple(t.shape)
            return out

    return Watch(), Largest()


class Session:
    def __init__(self, mode):
        self.mode = mode
        self.device = "cuda" if mode == "gpu" else "cpu"
        self.namespaces = {}
        self.launched = []
        self._hook_kernel_launches()

    def _hook_kernel_launches(self):
        # Record each Triton kernel launched, whether compiled or interpreted, by name.
        try:
            from triton.runtime.jit import JITFunction
            from triton.runtime.interpreter import InterpretedFunction
        except Exception:
            return
        launched = self.launched
        for cls in (JITFunction, InterpretedFunction):
            original = cls.run

            def run(self, *args, __original=original, **kwargs):
                launched.append(getattr(self, "__name__", None) or getattr(self.fn, "__name__", "?"))
                return __original(self, *args, **kwargs)
            cls.run = run

    def load(self, key, path):
        namespace = {"__name__": f"submission_{key}", "__file__": path}
        with open(path, encoding="utf-8") as f:
            code = compile(f.read(), path, "exec")
        started = time.time()
        exec(code, namespace)  # a real file, so Triton can read each kernel's source
        self.namespaces[key] = namespace
        names = sorted(k for k in namespace if not k.startswith("__"))
        return {"names": names, "seconds": time.time() - started}

    def call(self, name, args, kwargs, key="student", backward=None, watch=True):
        import torch
        fn = self.namespaces[key].get(name)
        if fn is None:
            raise LookupError(f"`{name}` is not defined in the notebook")
        args, kwargs = _to_device(args, self.device), _to_device(kwargs, self.device)
        if backward is not None:
            for a in args:
                if isinstance(a, torch.Tensor) and a.is_floating_point():
                    a.requires_grad_(True)
        before = [a.detach().clone() if isinstance(a, torch.Tensor) else None for a in args]
        watch_mode, largest = _watchers()
        del self.launched[:]
        started = time.time()
        if watch:
            with largest, watch_mode:
                out = fn(*args, **kwargs)
        else:
            out = fn(*args, **kwargs)
        grads = None
        if backward is not None:
            grad_out = _to_device(backward, self.device)
            with watch_mode:
                torch.autograd.backward(out, grad_out)
            grads = [a.grad if isinstance(a, torch.Tensor) else None for a in args]
        if self.device == "cuda":
            torch.cuda.synchronize()
        seconds = time.time() - started
        modified = [i for i, (a, b) in enumerate(zip(args, before)) if b is not None and not _same_bits(a, b)]
        info = {"launched": sorted(set(self.launched)), "forbidden": watch_mode.calls,
                "largest_numel": largest.numel, "largest_shape": largest.shape,
                "inputs_modified": modified, "seconds": seconds}
        return _to_cpu(out), _to_cpu(grads), info

    def bench(self, name, args, kwargs, key="student", backward=False, reps=None):
        """Median milliseconds of one call (forward, or forward+backward), timed on this device."""
        import torch
        fn = self.namespaces[key][name]
        args = _to_device(args, self.device)
        if backward:
            args = [a.requires_grad_(True) if isinstance(a, torch.Tensor) else a for a in args]
            out = fn(*args, **kwargs)
            grad = torch.randn_like(out)
            run = lambda: torch.autograd.grad(fn(*args, **kwargs), [a for a in args if isinstance(a, torch.Tensor)], grad)
        else:
            run = lambda: fn(*args, **kwargs)
        if self.device == "cuda":
            import triton.testing
            return triton.testing.do_bench(run, warmup=25, rep=reps or 100)
        times = []
        for _ in range(reps or 3):
            started = time.perf_counter()
            run()
            times.append((time.perf_counter() - started) * 1e3)
        return sorted(times)[len(times) // 2]

    def aot(self, kernel, signature, constexprs, capabilities, num_warps=4, num_stages=None):
        """Compile a kernel ahead of time for real GPUs; returns {capability: shared memory bytes}."""
        import triton
        from triton.backends.compiler import GPUTarget
        fn = self.namespaces["student"].get(kernel)
        if fn is None:
            raise LookupError(f"`{kernel}` is not defined in the notebook")
        while not isinstance(fn, triton.runtime.jit.JITFunction) and hasattr(fn, "fn"):
            fn = fn.fn  # autotuner / heuristics wrapper
        if not isinstance(fn, triton.runtime.jit.JITFunction):
            raise TypeError(f"`{kernel}` is not a @triton.jit kernel")
        shared = {}
        for cc in capabilities:
            options = {"num_warps": num_warps}
            if num_stages:
                options["num_stages"] = num_stages
            source = triton.compiler.ASTSource(fn=fn, signature=signature, constexprs=constexprs)
            compiled = triton.compile(source, target=GPUTarget("cuda", cc, 32), options=options)
            shared[cc] = compiled.metadata.shared
        return shared


def describe(error):
    """The last frames of a traceback that are in the student's program, plus the error."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if "submission" in (f.filename or "")]
    where = "".join(f"  line {f.lineno} of the notebook program: {f.line}\n" for f in frames[-3:])
    return f"{type(error).__name__}: {str(error).strip()[:1500]}" + (f"\n{where}" if where else "")


def main(fd):
    conn = Connection(fd)
    os.environ.setdefault("FA_QUIET", "1")
    session = None
    while True:
        try:
            request = pickle.loads(conn.recv_bytes())
        except EOFError:
            return
        op, payload = request
        try:
            if op == "start":
                session = Session(payload["mode"])
                reply = ("ok", None)
            elif op == "stop":
                conn.send_bytes(pickle.dumps(("ok", None)))
                return
            else:
                reply = ("ok", getattr(session, op)(**payload))
        except BaseException as error:  # SystemExit from student code too: report it, keep serving
            reply = ("error", type(error).__name__, describe(error))
        try:
            conn.send_bytes(pickle.dumps(reply))
        except Exception as error:  # an output that cannot be pickled
            conn.send_bytes(pickle.dumps(("error", type(error).__name__, f"could not return the result: {error}")))
        sys.stdout.flush()
        sys.stderr.flush()


if __name__ == "__main__":
    main(int(sys.argv[1]))
