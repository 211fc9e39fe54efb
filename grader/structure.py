"""Structure checks (AST only): what can be judged about code that cannot be run here."""
import ast


def _functions(program):
    tree = ast.parse(program)
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


def check_structure(lesson, check, program):
    """None if the functions a check needs look complete, else what is missing."""
    try:
        functions = _functions(program)
    except SyntaxError as error:
        return f"the notebook's code has a SyntaxError: {error}"
    for name in check.needs:
        fn = functions[name]
        if name in lesson.kernels and not is_triton_kernel(fn):
            return f"`{name}` must be a Triton kernel (decorated with @triton.jit)"
        if name not in lesson.kernels:
            for kernel in check.kernels:
                if kernel not in launched_kernels(fn) and kernel in lesson.kernels:
                    return f"`{name}` never launches `{kernel}` (expected `{kernel}[grid](...)`)"
            bad = called_names(fn) & set(lesson.forbidden)
            if bad:
                return f"`{name}` calls {sorted(bad)}, which this lesson asks you to write yourself"
        missing = [e for e in lesson.structure_needs.get(name, ()) if e not in used_expressions(fn)]
        if missing:
            return f"`{name}` does not use {', '.join(missing)}, which this computation needs"
    return None
