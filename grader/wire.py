"""Plain data between the judge and a worker (COURSE_SPEC §5): JSON for everything but tensors, raw bytes for tensors.

Nothing that crosses from a worker to the judge is unpickled. A message is the length of a JSON header (8 bytes),
the header, then the bytes of each tensor storage back to back. `decode` builds only dict, list, str, int, float,
bool, None, torch tensors of a dtype in DTYPES, and `Foreign` markers; it never imports, never calls anything the
data names, and checks every size and index before it allocates. A value that is not plain data (a custom object,
a tensor subclass, a numpy array) is sent as `Foreign("its type")`, so the judge can say what came back.

This file and worker.py are the only course files inside the sandbox (grader/sandbox.py): keep it free of imports
from the rest of the grader.
"""
import json
import struct

import torch

DTYPES = {name: getattr(torch, name) for name in
          ("float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool")}
DTYPE_NAMES = {dtype: name for name, dtype in DTYPES.items()}
MAX_DEPTH = 16          # nesting of lists and dicts
MAX_ITEMS = 100_000     # list items and dict entries in one message
MAX_DIMS = 8
SPECIAL = ("$tensor", "$foreign", "$dict")  # a dict with one of these as its only key is not a plain dict


class WireError(ValueError):
    """A message that is not plain data of the expected form."""


class Foreign:
    """What a value that cannot travel as plain data becomes: only the name of its type crosses."""

    def __init__(self, what):
        self.what = str(what)[:200]

    def __repr__(self):
        return f"<{self.what}>"

    def __eq__(self, other):
        return isinstance(other, Foreign) and other.what == self.what


def describe_type(value):
    """How a learner would name what came back: 'a list', 'a tuple of 2', 'a torch.Tensor', 'a MyClass object'."""
    if isinstance(value, Foreign):
        return value.what
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)}"
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    return "None" if value is None else f"a {type(value).__name__}"


# ── encoding (either side) ──────────────────────────────────────────────────────────────────────────
def _storage_bytes(tensor):
    """The bytes of a tensor's whole storage (CPU copy): views keep their strides and offsets."""
    flat = torch.empty(0, dtype=torch.uint8, device=tensor.device).set_(tensor.untyped_storage())
    return flat.cpu().numpy().tobytes()


def encode(value, keep_storage=False):
    """One message (bytes) for `value`. keep_storage=True sends each tensor's whole storage, once per storage, with
    its strides and offset (the judge's inputs: views, gaps and the NaN around them arrive as they were made);
    otherwise each tensor travels as a contiguous copy (outputs)."""
    blobs, storage_index, count = [], {}, [0]

    def tensor_header(t):
        if t.dtype not in DTYPE_NAMES:
            return {"$foreign": f"a tensor of dtype {t.dtype}"}
        t = t.detach()
        if keep_storage:
            key = (t.device.type, t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
            if key not in storage_index:
                storage_index[key] = len(blobs)
                blobs.append(_storage_bytes(t))
            return {"$tensor": {"blob": storage_index[key], "dtype": DTYPE_NAMES[t.dtype], "shape": list(t.shape),
                                "stride": list(t.stride()), "offset": t.storage_offset()}}
        t = t.contiguous()
        blobs.append(t.view(-1).view(torch.uint8).cpu().numpy().tobytes() if t.numel() else b"")
        return {"$tensor": {"blob": len(blobs) - 1, "dtype": DTYPE_NAMES[t.dtype], "shape": list(t.shape),
                            "stride": list(t.stride()), "offset": 0}}

    def enc(v, depth):
        count[0] += 1
        kind = type(v)
        if v is None or kind in (bool, int, float, str):
            return v
        if kind in (list, tuple, dict):
            if depth >= MAX_DEPTH:
                return {"$foreign": f"a {kind.__name__} nested more than {MAX_DEPTH} levels deep"}
            if count[0] + len(v) > MAX_ITEMS:
                return {"$foreign": f"a {kind.__name__} of {len(v)} items (more than a reply may hold)"}
        if kind in (list, tuple):
            return [enc(x, depth + 1) for x in v]
        if kind is dict and all(type(k) is str for k in v):
            plain = {k: enc(x, depth + 1) for k, x in v.items()}
            return {"$dict": plain} if any(k.startswith("$") for k in plain) else plain
        if kind is torch.Tensor:
            return tensor_header(v)
        if isinstance(v, torch.Tensor):
            return {"$foreign": f"a tensor subclass ({kind.__name__})"}
        return {"$foreign": f"a {kind.__module__}.{kind.__qualname__} object" if kind.__module__ != "builtins"
                else f"a {kind.__name__}"}

    tree = enc(value, 0)
    header = json.dumps({"value": tree, "blobs": [len(b) for b in blobs]}, allow_nan=True).encode("utf-8")
    return b"".join([struct.pack("<Q", len(header)), header, *blobs])


# ── decoding (the judge decodes what a worker sends; the worker decodes the judge's requests) ────────
def _int_list(x, what):
    if type(x) is not list or len(x) > MAX_DIMS or not all(type(i) is int and 0 <= i < 2 ** 40 for i in x):
        raise WireError(f"bad tensor {what}: {str(x)[:80]}")
    return x


def _tensor(spec, storages):
    if type(spec) is not dict or set(spec) != {"blob", "dtype", "shape", "stride", "offset"}:
        raise WireError("bad tensor header")
    if spec["dtype"] not in DTYPES:
        raise WireError(f"tensor dtype {str(spec['dtype'])[:40]} is not allowed")
    dtype = DTYPES[spec["dtype"]]
    shape, stride = _int_list(spec["shape"], "shape"), _int_list(spec["stride"], "stride")
    offset, blob = spec["offset"], spec["blob"]
    if len(shape) != len(stride) or type(offset) is not int or offset < 0 or type(blob) is not int \
            or not 0 <= blob < len(storages):
        raise WireError("bad tensor header")
    storage = storages[blob]
    itemsize = torch.empty((), dtype=dtype).element_size()
    if storage.numel() % itemsize:
        raise WireError("tensor bytes are not a whole number of elements")
    elements = storage.numel() // itemsize
    numel = 1
    for size in shape:
        numel *= size
    if numel and offset + sum((size - 1) * step for size, step in zip(shape, stride)) >= elements:
        raise WireError("tensor header points past its bytes")
    if not elements:
        return torch.empty(shape, dtype=dtype, device=storage.device)
    return storage.view(dtype).as_strided(shape, stride, offset)


def decode(message, device="cpu"):
    """The value of one message, with its tensors on `device` (views of one storage share it there too)."""
    if len(message) < 8:
        raise WireError("message too short")
    (length,) = struct.unpack("<Q", message[:8])
    if length > len(message) - 8:
        raise WireError("message header too long")
    try:
        header = json.loads(message[8:8 + length].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise WireError(f"message header is not JSON: {error}")
    if type(header) is not dict or set(header) != {"value", "blobs"} or type(header["blobs"]) is not list:
        raise WireError("message header has the wrong keys")
    sizes = header["blobs"]
    if not all(type(n) is int and n >= 0 for n in sizes) or sum(sizes) != len(message) - 8 - length:
        raise WireError("message bytes do not add up")
    storages, at = [], 8 + length
    for n in sizes:
        raw = torch.frombuffer(bytearray(message[at:at + n]), dtype=torch.uint8) if n else torch.empty(0, dtype=torch.uint8)
        storages.append(raw.to(device))
        at += n
    count = [0]

    def dec(v, depth):
        count[0] += 1
        if depth > MAX_DEPTH or count[0] > MAX_ITEMS:
            raise WireError("message too deeply nested or too long")
        if v is None or type(v) in (bool, int, float, str):
            return v
        if type(v) is list:
            return [dec(x, depth + 1) for x in v]
        if type(v) is not dict:
            raise WireError("unexpected JSON value")
        special = [k for k in v if k.startswith("$")]
        if not special:
            return {k: dec(x, depth + 1) for k, x in v.items()}
        if len(v) != 1 or special[0] not in SPECIAL:
            raise WireError("unexpected $-key")
        key, inner = special[0], v[special[0]]
        if key == "$tensor":
            return _tensor(inner, storages)
        if key == "$foreign":
            if type(inner) is not str:
                raise WireError("bad foreign marker")
            return Foreign(inner)
        if type(inner) is not dict:
            raise WireError("bad $dict")
        return {k: dec(x, depth + 1) for k, x in inner.items()}

    return dec(header["value"], 0)


# ── framing over a socket ───────────────────────────────────────────────────────────────────────────
class Timeout(Exception):
    """No whole message arrived in time."""


class TooLarge(Exception):
    """The other side announced a message larger than the receiver accepts."""


def send_message(sock, message):
    sock.sendall(struct.pack("<Q", len(message)) + message)


def recv_message(sock, max_bytes, timeout=None):
    """One whole message; a deadline covers all of it (a sender that stalls half-way cannot hang the judge)."""
    import time
    deadline = None if timeout is None else time.monotonic() + timeout

    def exactly(n):
        parts, left = [], n
        while left:
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise Timeout()
                sock.settimeout(remaining)
            try:
                chunk = sock.recv(min(left, 1 << 20))
            except TimeoutError:
                raise Timeout()
            if not chunk:
                raise EOFError("the other side closed the connection")
            parts.append(chunk)
            left -= len(chunk)
        return b"".join(parts)

    (length,) = struct.unpack("<Q", exactly(8))
    if length > max_bytes:
        raise TooLarge(length)
    return exactly(length)
