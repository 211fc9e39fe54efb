"""Structure checks (AST only): what can be judged about code that cannot be run here."""
import ast
import functools
import threading

_PARSING = threading.Lock()


@functools.lru_cache(maxsize=32)
def _parsed(text):
    return ast.parse(text)


def parse(text):
    """ast.parse, once per text and one thread at a time: the checks of a submission run in threads, and CPython
    3.11's parser is not safe in two threads at once ("SystemError: AST constructor recursion depth mismatch",
    cpython gh-106905). The tree is shared: callers must not change it."""
    with _PARSING:
        return _parsed(text)


def _functions(program):
    tree = parse(program)
    return {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _dotted(node):
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def is_triton_kernel(fn):
    names = {_dotted(d.func if isinstance(d, ast.Call) else d) for d in fn.decorator_list}
    return bool(names & {"triton.jit", "jit"})


def launched_kernels(fn):
    """Names K launched as K[grid](...) inside fn."""
    return {_dotted(node.func.value) for node in ast.walk(fn)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript)}


def called_names(fn):
    return {_dotted(node.func).split(".")[-1] for node in ast.walk(fn) if isinstance(node, ast.Call)} | \
           {"__matmul__" for node in ast.walk(fn) if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult)}


def used_expressions(fn):
    return {_dotted(node) for node in ast.walk(fn) if isinstance(node, (ast.Attribute, ast.Name))}


def check_structure(lesson, check, program, language="en"):
    """None if the functions a check needs look complete, else what is missing."""
    from .messages import text
    try:
        functions = _functions(program)
    except SyntaxError as error:
        return text("syntax_error", language, error=error)
    for name in check.needs:
        fn = functions[name]
        if name in lesson.kernels and not is_triton_kernel(fn):
            return text("not_jit", language, name=name)
        if name not in lesson.kernels:
            for kernel in check.kernels:
                if kernel not in launched_kernels(fn) and kernel in lesson.kernels:
                    return text("never_launches", language, name=name, kernel=kernel)
            bad = called_names(fn) & set(lesson.forbidden)
            if bad:
                return text("calls_forbidden", language, name=name, calls=sorted(bad))
        missing = [e for e in lesson.structure_needs.get(name, ()) if e not in used_expressions(fn)]
        if missing:
            return text("does_not_use", language, name=name, missing=", ".join(missing))
    return None


def definition_lines(program):
    """{name: {lines}} of each top-level function: its decorators' lines and its `def` line (where Python and Triton
    say the function starts)."""
    try:
        tree = parse(program)
    except SyntaxError:
        return {}
    return {n.name: {n.lineno, *(d.lineno for d in n.decorator_list)}
            for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


# ── code that reaches into the grading process ───────────────────────────────────────────────────────
# What the worker measures about a submission (kernels launched, torch calls, the largest tensor, inputs changed)
# is measured in the process that runs it, so code that reaches into that process could forge it: through the
# module registry, stack frames, the garbage collector, the object graph (dunder attributes), private torch or
# Triton internals, raw file descriptors (the worker's socket), dynamic code, or by patching a module. The judge
# reads the learner's own cells (never the worker's account of them) and refuses these capabilities up front.
REACHING_MODULES = {"gc", "sys", "os", "inspect", "importlib", "ctypes", "builtins", "socket", "subprocess",
                    "multiprocessing", "threading", "_thread", "signal", "pickle", "marshal", "types", "io", "weakref",
                    "atexit", "faulthandler", "code", "dis", "traceback", "shutil", "pathlib", "tempfile", "runpy",
                    "site", "operator", "grader", "wire", "worker", "cffi", "mmap", "fcntl", "resource", "pty"}
REACHING_NAMES = REACHING_MODULES | {"eval", "exec", "compile", "__import__", "globals", "locals", "vars", "getattr",
                                     "setattr", "delattr", "open", "breakpoint", "memoryview"}
REACHING_ATTRIBUTES = {"f_back", "f_globals", "f_locals", "f_builtins", "f_code", "tb_frame", "tb_next", "gi_frame",
                       "cr_frame", "ag_frame", "gi_code", "overrides", "ctypeslib", "ctypes"}
# files through torch or numpy (torch.load unpickles, so it runs code chosen by the file)
FILE_ATTRIBUTES = {"load", "loads", "save", "from_file", "fromfile", "tofile", "memmap", "loadtxt", "savetxt",
                   "genfromtxt", "fromregex", "serialization", "hub", "package", "library", "load_library",
                   "cpp_extension"}
HARMLESS_DUNDERS = {"__name__", "__file__", "__doc__", "__init__"}


def tampering(code):
    """[(line, what)] for each construct in `code` (the learner's cells, notebook.student_code) that could reach into
    the grading process or patch a module; [] for ordinary code."""
    try:
        tree = parse(code)
    except SyntaxError:
        return []
    modules = {"torch", "triton", "tl", "F", "math", "np", "numpy", "time", "functools", "itertools", "os", "sys"}
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    file_modules = {"torch", "np", "numpy"}  # torch.load, np.fromfile, … (not tl.load: Triton's loads are fine)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules.update((a.asname or a.name).split(".")[0] for a in node.names)
        if isinstance(node, ast.Import):
            file_modules.update((a.asname or a.name).split(".")[0] for a in node.names
                                if a.name.split(".")[0] in ("torch", "numpy"))
    # a name bound to a module's attribute (`b = triton.runtime.interpreter.InterpreterBuilder`) is that module as
    # far as a change goes: `b.create_masked_load = …` patches Triton as surely as the spelled-out assignment
    def attribute_chain_root(node):
        while isinstance(node, ast.Attribute):
            node = node.value
        return node.id if isinstance(node, ast.Name) else None
    aliases = None
    while aliases != modules:
        aliases = set(modules)
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and isinstance(node.value, (ast.Attribute, ast.Name)) \
                    and attribute_chain_root(node.value) in modules:
                modules.update(t.id for target in node.targets for t in ast.walk(target) if isinstance(t, ast.Name))
    found = []

    def flag(node, what):
        found.append((node.lineno, what))

    def root(node):
        while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
            node = node.func if isinstance(node, ast.Call) else node.value
        return node.id if isinstance(node, ast.Name) else None

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] in REACHING_MODULES or any(p.startswith("_") or p == "overrides" for p in parts):
                    flag(node, f"`import {alias.name}`")
        elif isinstance(node, ast.ImportFrom):
            parts = (node.module or "").split(".")
            names = [a.name for a in node.names]
            if node.level or parts[0] in REACHING_MODULES or any(p.startswith("_") or p == "overrides" for p in parts) \
                    or any(n.startswith("_") or n == "*" for n in names):
                flag(node, f"`from {'.' * node.level}{node.module or ''} import {', '.join(names)}`")
        elif isinstance(node, ast.Name):
            reads_environment = (node.id == "os" and isinstance(parents.get(node), ast.Attribute)
                                 and parents[node].attr == "environ")  # os.environ.get("TRITON_INTERPRET")
            if reads_environment:
                continue
            if node.id in REACHING_NAMES or (node.id.startswith("__") and node.id not in HARMLESS_DUNDERS):
                flag(node, f"`{node.id}`")
        elif isinstance(node, ast.Attribute):
            if (node.attr.startswith("_") and node.attr not in HARMLESS_DUNDERS) or node.attr in REACHING_ATTRIBUTES \
                    or (node.attr in FILE_ATTRIBUTES and root(node) in file_modules):
                flag(node, f"`.{node.attr}`")
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for target in targets:
                for t in ast.walk(target):
                    if isinstance(t, (ast.Attribute, ast.Subscript)) and root(t) in modules:
                        flag(node, f"a change to `{root(t)}` (`{ast.unparse(t)[:60]}`)")
                        break
    return sorted(set(found))


def tampering_message(found, program, language="en"):
    from .messages import text
    from .worker import cell_and_line
    line, what = found[0]
    more = text("and_more", language, count=len(found) - 1, s="s" if len(found) > 2 else "") if len(found) > 1 else ""
    code = program.split("\n")[line - 1].strip() if 0 < line <= program.count("\n") + 1 else ""
    return text("tampering", language, what=what, where=cell_and_line(program, line, language), code=code[:100],
                more=more)
