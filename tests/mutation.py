"""Mutation testing (COURSE_SPEC §5, issue 11 §2): one-token changes of each lesson's reference solution, each
graded like a submission. A mutant is killed when a check fails; one that gets full marks survives, and is then
either killed by a new or sharper check (the lesson's owner writes it) or written down in
tests/mutation_equivalents.py as equivalent, with the reason (equivalents are listed, and left out of the score).

    make mutation-score       # = python tests/mutation.py --mode interpreter --jobs 2 \
                              #     --out tests/reports/mutation_interpreter.txt \
                              #     --survivors-out tests/reports/mutation_interpreter_survivors.txt
    make mutation-score MODE=gpu ONLY_IDS=tests/reports/mutation_interpreter_survivors.txt   # those, on a GPU
    python tests/mutation.py --lessons 03_per_query_kernel --sample 5 --seed 0     # a quick look
    python tests/mutation.py --lessons 03_per_query_kernel --list                  # the mutants, not graded

Only the lines inside the source notebook's `### BEGIN SOLUTION … ### END SOLUTION` regions change (what a
learner writes). The operators: arithmetic operators and their augmented forms (`+=` → `=` too), comparisons
(`<` ↔ `<=` included), `&` ↔ `|`, integer constants ±1 (0 → 1), -inf ↔ 0.0 (any -inf, and a 0 that fills masked-off
elements: `other=`, `tl.where`, `masked_fill`, `full`), True ↔ False, exp ↔ exp2 and log ↔ log2, the reductions
max ↔ maximum ↔ sum (amax, minimum; Python's min ↔ max), a `mask=` or `other=` argument dropped, a `where` or
`masked_fill` dropped, one term of `a & b` dropped, `[:, None]` ↔ `[None, :]` (and `[..., None]`), the names
"BLOCK_M" ↔ "BLOCK_N" in strings, one variable for another of the same kind that the function has at that line
(BLOCK_M ↔ BLOCK_N, stride_qm ↔ stride_kn, offs_m ↔ offs_n, k ↔ v, m_i ↔ l_i, N_CTX_Q ↔ N_CTX_K, …: same_kind;
not in `x.device` or `x.dtype`, which are the same for every tensor of a call),
and a scale factor dropped (`* sm_scale`, `* qk_scale`, `/ math.sqrt(d)`, `* LOG2E`).

A mutant's id is `lesson:cell:line:column:old→new` (the line and column in the learner's cell, 1-based, the cell
named by its nbgrader grade_id; whitespace left out of old and new; ∅ for nothing). An id names the same mutant
for as long as its cell's code stays the same; --survivors-out and tests/mutation_equivalents.py also keep the
changed line's text, with which an id still finds its mutant after lines above it moved. Mutants that leave the
code unchanged or repeat another's text are dropped.

Grading: the reference-filled notebook (`grader fill`) with the one change, through grader.harness.run_lesson, one
check at a time, stopping at the first failing check. The checks that need a function of the changed cell run
first (in the lesson's order), then the others (in the lesson's order); a check the mode cannot run is judged as
the harness judges it (statically; it counts because every check that ran passed). Each check gets --timeout
seconds: longer is a hang, a kill reported as such. Kills are reported by kind: a wrong result, an error (syntax,
compile or run-time), a hang, a crash. Each lesson's unchanged reference is graded first, the same way: when it
fails a check (a lesson in the middle of an edit, course/ not rebuilt) its mutants are not graded, since every one
would look killed. Exit status 1 when a mutant not listed as equivalent survives, or a reference fails.
Not a pytest file: the full run takes hours on two cores (tests/test_mutation.py grades a fixed sample).
"""
import argparse
import ast
import concurrent.futures as futures
import io
import json
import keyword
import multiprocessing
import os
import random
import re
import resource
import sys
import tempfile
import time
import tokenize
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import nbformat  # noqa: E402

from grader import notebook  # noqa: E402

BEGIN, END = notebook.BEGIN, notebook.END
NOTHING = "∅"

# ── the operators ──────────────────────────────────────────────────────────────────────────────────────
# One-token replacements, by token text.
ARITHMETIC = {"+": ["-", "*"], "-": ["+"], "*": ["/", "+"], "/": ["*", "//"], "//": ["/", "*"], "**": ["*"],
              "%": ["//"], "@": ["*"],
              "+=": ["-=", "="], "-=": ["+=", "="], "*=": ["/=", "="], "/=": ["*=", "="]}
UNARY = {"-": ["+"], "+": ["-"]}
COMPARISONS = {"<": ["<=", ">"], "<=": ["<", ">"], ">": [">=", "<"], ">=": [">", "<"], "==": ["!="], "!=": ["=="]}
LOGICAL = {"&": ["|"], "|": ["&"]}
EXPONENTIALS = {"exp": ["exp2"], "exp2": ["exp"], "log": ["log2"], "log2": ["log"]}
REDUCTIONS = {"max": ["maximum", "sum"], "maximum": ["max", "minimum"], "minimum": ["maximum"], "sum": ["max"],
              "amax": ["max", "sum"], "min": ["max"]}
BUILTIN_MIN_MAX = {"min": ["max"], "max": ["min"]}
BLOCK_NAMES_IN_STRINGS = {"BLOCK_M": ["BLOCK_N"], "BLOCK_N": ["BLOCK_M"], "block_m": ["block_n"],
                          "block_n": ["block_m"]}
BOOLEANS = {"True": ["False"], "False": ["True"]}
MINUS_INF = 'float("-inf")'

# Names of one kind, any of which may stand for another (in the same function).
NAME_GROUPS = [
    {"q", "k", "v", "o", "do"}, {"Q", "K", "V", "O", "Out", "DO"}, {"dq", "dk", "dv"}, {"DQ", "DK", "DV"},
    {"N", "M", "n", "N_CTX", "N_CTX_Q", "N_CTX_K", "n_cols", "n_rows"}, {"D", "d", "HEAD_DIM"}, {"B", "H"},
    {"lse", "delta"}, {"LSE", "Delta"}, {"p", "ds", "dp"}, {"pT", "dsT", "dpT"}, {"qk", "p"}, {"qkT", "pT"},
    {"s", "p"}, {"m", "l"}, {"m_i", "l_i", "m_new", "m_ij", "m_safe"}, {"rows", "cols", "keys"},
    {"lo", "hi", "full_hi", "masked_hi", "full_lo", "tail_lo", "diag_hi", "m_full", "mask_start", "stop_n"},
    {"x", "numerator"}, {"y", "numerator"},
]
# Parts of a name that say which of several things of one kind it is: two names that differ in one such part
# (m_i ↔ l_i, start_m ↔ end_m, q_ptrs ↔ k_ptrs, N_CTX_Q ↔ N_CTX_K, in_ptr ↔ out_ptr) are of one kind.
ROLE_WORDS = {"in", "out", "start", "end", "full", "masked", "tail", "diag", "lo", "hi", "kv"}
STRIDE = re.compile(r"stride_(do|dq|dk|dv|q|k|v|o)([zhmndk])$")
DIM_ROLE = {"z": "batch", "h": "head", "m": "row", "n": "row", "k": "feature", "d": "feature"}


def same_kind(a, b):
    """Whether name `b` is a plausible slip for name `a` (one variable for another of the same kind)."""
    if a == b or keyword.iskeyword(b):
        return False
    sa, sb = STRIDE.match(a), STRIDE.match(b)
    if sa or sb:  # strides: the same tensor's other dimension, or another tensor's same dimension
        return bool(sa and sb) and ((sa[1] == sb[1]) != (DIM_ROLE[sa[2]] == DIM_ROLE[sb[2]]))
    for prefix in ("BLOCK_", "block_", "offs_"):
        if a.startswith(prefix) and b.startswith(prefix):
            return True
    if any(a in group and b in group for group in NAME_GROUPS):
        return True
    pa, pb = a.split("_"), b.split("_")
    if len(pa) != len(pb) or len(pa) < 2 or not all(pa + pb):
        return False
    differ = [(x, y) for x, y in zip(pa, pb) if x != y]
    return len(differ) == 1 and all(len(w) <= 2 or w in ROLE_WORDS for w in differ[0])


def is_scale(node):
    """A factor that scales scores: sm_scale, qk_scale, LOG2E, log2(e) as a number, math.sqrt(…)."""
    if isinstance(node, ast.Name):
        return "scale" in node.id.lower() or node.id.upper() == "LOG2E"
    if isinstance(node, ast.Attribute):
        return "scale" in node.attr.lower()
    if isinstance(node, ast.Constant) and isinstance(node.value, float):
        return abs(node.value - 1.4426950408889634) < 1e-6
    if isinstance(node, ast.Call):
        return dotted(node.func).split(".")[-1] in ("sqrt", "rsqrt")
    return False


def dotted(node):
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def is_minus_inf(node):
    """-inf as code writes it: float("-inf"), -float("inf"), -math.inf, -torch.inf, float('-inf')."""
    if isinstance(node, ast.Call) and dotted(node.func) == "float" and len(node.args) == 1:
        arg = node.args[0]
        return isinstance(arg, ast.Constant) and str(arg.value).strip().lower() in ("-inf", "-infinity")
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = node.operand
        if isinstance(inner, ast.Call) and dotted(inner.func) == "float" and len(inner.args) == 1:
            return isinstance(inner.args[0], ast.Constant) and str(inner.args[0].value).lower() in ("inf", "infinity")
        return dotted(inner) in ("math.inf", "torch.inf", "np.inf", "float.inf")
    return False


def is_zero(node):
    return isinstance(node, ast.Constant) and type(node.value) in (int, float) and node.value == 0


def fill_values(tree):
    """Expressions that are the value given to masked-off elements: `other=`, the branches of a `where`, the value
    of `masked_fill` and of `full`."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = dotted(node.func).split(".")[-1]
        for kw in node.keywords:
            if kw.arg in ("other", "value", "fill_value"):
                yield kw.value
        if name == "where":
            yield from node.args[1:3]
        elif name in ("masked_fill", "masked_fill_"):
            yield from node.args[1:2]
        elif name in ("full", "full_like"):
            yield from node.args[1:2]


def standing_alone(node, parents):
    """Whether an expression in `node`'s place needs no parentheses: a whole right-hand side, argument, element."""
    parent = parents.get(id(node))
    return isinstance(parent, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return, ast.keyword, ast.Call,
                               ast.Tuple, ast.List, ast.Expr)) and getattr(parent, "func", None) is not node


def atom(text, node, place=None, parents=None):
    """`text` of `node`, to stand where `place` was: in parentheses unless it is an atom or `place` stands alone
    (so the replacement keeps its meaning in any context)."""
    if isinstance(node, (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant)):
        return text
    if place is not None and standing_alone(place, parents or {}):
        return text
    return f"({text})"


# ── finding the mutants of one piece of code ───────────────────────────────────────────────────────────
@dataclass(frozen=True)
class Change:
    start: int        # character offsets in the code
    end: int
    new: str          # the replacement text of code[start:end]
    line: int         # 1-based line and column of what is shown as `old`
    col: int
    old: str          # what changes, as shown (may differ from code[start:end], e.g. a dropped argument's comma)
    shown_new: str
    kind: str
    description: str


class Code:
    def __init__(self, text):
        self.text = text
        self.lines = text.split("\n")
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line) + 1)

    def offset(self, line, col):
        """Character offset of (1-based line, 0-based character column)."""
        return self.starts[line - 1] + col

    def node_offset(self, line, byte_col):
        """Character offset of an AST position (its columns count UTF-8 bytes)."""
        text = self.lines[line - 1].encode("utf-8")[:byte_col].decode("utf-8", "replace")
        return self.starts[line - 1] + len(text)

    def span(self, node):
        return (self.node_offset(node.lineno, node.col_offset), self.node_offset(node.end_lineno, node.end_col_offset))

    def position(self, offset):
        """(1-based line, 1-based column) of a character offset."""
        line = max(i for i, s in enumerate(self.starts[:-1]) if s <= offset)
        return line + 1, offset - self.starts[line] + 1


def compact(text):
    return re.sub(r"\s+", "", text) or NOTHING


def token_changes(code):
    """The one-token changes: operators, comparisons, numbers, names of functions, strings, booleans."""
    try:
        tokens = [t for t in tokenize.generate_tokens(io.StringIO(code.text).readline)
                  if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return
    for i, tok in enumerate(tokens):
        before = tokens[i - 1] if i else None
        after = tokens[i + 1] if i + 1 < len(tokens) else None
        start, end = code.offset(*tok.start), code.offset(*tok.end)
        prev_text = before.string if before else ""
        after_keyword = before is not None and before.type == tokenize.NAME and keyword.iskeyword(prev_text) \
            and prev_text not in ("True", "False", "None")
        unary = before is None or after_keyword or (before.type == tokenize.OP and prev_text not in (")", "]", "}"))
        if tok.string == "@" and (before is None or before.end[0] < tok.start[0]):
            continue  # a decorator

        def change(new, kind, description):
            return Change(start, end, new, tok.start[0], tok.start[1] + 1, tok.string, new, kind, description)

        s = tok.string
        if tok.type == tokenize.OP:
            if unary:
                for new in UNARY.get(s, []):
                    yield change(new, "operator", f"unary `{s}` → `{new}`")
            elif s in ARITHMETIC:
                for new in ARITHMETIC[s]:
                    yield change(new, "operator", f"`{s}` → `{new}`")
            elif s in COMPARISONS:
                for new in COMPARISONS[s]:
                    yield change(new, "comparison", f"`{s}` → `{new}`")
            elif s in LOGICAL:
                for new in LOGICAL[s]:
                    yield change(new, "logical", f"`{s}` → `{new}`")
        elif tok.type == tokenize.NUMBER and re.fullmatch(r"\d+", s):
            value = int(s)
            for new in ([value + 1, value - 1] if value else [1]):
                yield change(str(new), "constant", f"integer {s} → {new}")
        elif tok.type == tokenize.NAME:
            attribute = prev_text == "." and before.type == tokenize.OP
            called = after is not None and after.string == "("
            if attribute and s in EXPONENTIALS:
                for new in EXPONENTIALS[s]:
                    yield change(new, "exp/log", f"`.{s}` → `.{new}`")
            elif attribute and s in REDUCTIONS:
                for new in REDUCTIONS[s]:
                    yield change(new, "reduction", f"`.{s}` → `.{new}`")
            elif not attribute and called and s in BUILTIN_MIN_MAX:
                for new in BUILTIN_MIN_MAX[s]:
                    yield change(new, "reduction", f"`{s}(…)` → `{new}(…)`")
            elif s in BOOLEANS:
                for new in BOOLEANS[s]:
                    yield change(new, "constant", f"{s} → {new}")
        elif tok.type == tokenize.STRING:
            try:
                value = ast.literal_eval(s)
            except (ValueError, SyntaxError):
                continue
            quote = s[-1]
            for new in BLOCK_NAMES_IN_STRINGS.get(value, []) if isinstance(value, str) else []:
                yield change(f"{quote}{new}{quote}", "block size", f"block-size name {s} → {quote}{new}{quote}")


class Scope:
    """The names a function (or the module) can use: its arguments, the names it never assigns (globals), and at
    a given line the names it assigned on earlier lines."""

    def __init__(self, node):
        self.node = node
        self.args, self.stored, self.loaded = set(), [], set()
        for n in ast.walk(node):
            if isinstance(n, ast.arg):
                self.args.add(n.arg)
            elif isinstance(n, ast.Name):
                if isinstance(n.ctx, ast.Load):
                    self.loaded.add(n.id)
                else:
                    self.stored.append((n.lineno, n.id))

    def names_at(self, line):
        ever_stored = {name for _, name in self.stored}
        if isinstance(self.node, ast.Module):
            return self.args | self.loaded | ever_stored
        return self.args | (self.loaded - ever_stored) | {name for at, name in self.stored if at < line}


def scopes(tree):
    """A Scope for the module and for every function (a lambda uses its function's)."""
    return [Scope(tree)] + [Scope(n) for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def enclosing_names(scope_list, node):
    """The names that the innermost function around `node` can use on node's line."""
    holders = [s for s in scope_list[1:] if s.node.lineno <= node.lineno <= s.node.end_lineno]
    scope = max(holders, key=lambda s: s.node.lineno) if holders else scope_list[0]
    return scope.names_at(node.lineno)


def ast_changes(code):
    """The changes that need the syntax tree: names, dropped arguments and masks, -inf ↔ 0.0, scales, broadcasts."""
    try:
        tree = ast.parse(code.text)
    except SyntaxError:
        return
    text = code.text

    def at(node, new, kind, description, old=None, start_end=None, shown_at=None):
        start, end = start_end or code.span(node)
        line, col = code.position(start if shown_at is None else shown_at)
        return Change(start, end, new, line, col, text[start:end] if old is None else old, new, kind, description)

    scope_list = scopes(tree)
    fills = {id(n) for n in fill_values(tree)}
    parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}

    def kept_text(kept, place):
        return atom(text[slice(*code.span(kept))], kept, place, parents)

    # q.device ↔ v.device, q.dtype ↔ out.dtype: the lessons' tensors share one device and one dtype (their wrappers
    # refuse others), so such a swap never changes anything; it is not generated.
    same_for_all = {id(n.value) for n in ast.walk(tree)
                    if isinstance(n, ast.Attribute) and n.attr in ("device", "dtype")}

    for node in ast.walk(tree):
        # one variable for another of the same kind, in the same function
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and id(node) not in same_for_all:
            names = enclosing_names(scope_list, node)
            for other in sorted(n for n in names if same_kind(node.id, n)):
                kind = "block size" if node.id.upper().startswith("BLOCK_") else "variable"
                yield at(node, other, kind, f"{kind} `{node.id}` → `{other}`")
        if isinstance(node, ast.Call):
            name = dotted(node.func).split(".")[-1]
            # a mask argument dropped: `other=`, or `mask=` (with its `other=`, which Triton refuses without a mask)
            items = sorted([code.span(a) for a in node.args] + [code.span(k) for k in node.keywords])
            by_name = {kw.arg: kw for kw in node.keywords}
            for dropped in (["mask", "other"], ["other"]):
                if dropped[0] not in by_name or (dropped == ["other"] and "mask" not in by_name):
                    continue
                kws = [by_name[k] for k in dropped if k in by_name]
                spans = [code.span(kw) for kw in kws]
                kw_start, kw_end = min(a for a, _ in spans), max(b for _, b in spans)
                if any(kw_start < a < kw_end for a, b in items if (a, b) not in spans):
                    continue  # not side by side
                prev = [e for _, e in items if e <= kw_start]
                after = [a for a, _ in items if a >= kw_end]
                start, end = (prev[-1], kw_end) if prev else (kw_start, after[0] if after else kw_end)
                shown = ", ".join(text[slice(*span)] for span in spans)
                yield at(node, "", "mask dropped", f"argument{'s' if len(kws) > 1 else ''} `{shown}` dropped",
                         old=shown, start_end=(start, end), shown_at=kw_start)
            # tl.where(mask, a, b) → a; x.masked_fill(mask, value) → x
            if name == "where" and len(node.args) == 3:
                for i, which in ((1, "second"), (2, "third")):
                    kept = node.args[i]
                    if not (isinstance(kept, ast.Constant) or is_minus_inf(kept)):
                        yield at(node, kept_text(kept, node), "mask dropped",
                                 f"`where` dropped: its {which} argument everywhere (no mask)")
            if name in ("masked_fill", "masked_fill_") and isinstance(node.func, ast.Attribute):
                kept = node.func.value
                yield at(node, kept_text(kept, node), "mask dropped", "`masked_fill` dropped (no mask)")
        # one term of a mask `a & b` dropped
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitAnd):
            for kept, gone in ((node.left, node.right), (node.right, node.left)):
                yield at(node, kept_text(kept, node), "mask dropped",
                         f"mask term `{text[slice(*code.span(gone))]}` dropped")
        # a scale factor dropped
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div)):
            for kept, gone in ((node.left, node.right), (node.right, node.left)):
                if is_scale(gone) and not (isinstance(node.op, ast.Div) and gone is node.left):
                    factor = f"{'*' if isinstance(node.op, ast.Mult) else '/'} {text[slice(*code.span(gone))]}"
                    yield at(node, kept_text(kept, node), "scale dropped", f"scale `{factor}` dropped")
        # -inf ↔ 0.0 where a value is given to masked-off elements (and any -inf → 0.0)
        if is_minus_inf(node):
            yield at(node, "0.0", "-inf/0.0", "-inf → 0.0")
        elif id(node) in fills and is_zero(node):
            yield at(node, MINUS_INF, "-inf/0.0", f"fill value {text[slice(*code.span(node))]} → -inf")
        # [:, None] ↔ [None, :] (and [..., None] ↔ [None, ...])
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Tuple) and len(node.slice.elts) == 2:
            a, b = node.slice.elts
            kinds = ["none" if isinstance(e, ast.Constant) and e.value is None else
                     "all" if isinstance(e, ast.Slice) and not (e.lower or e.upper or e.step) else
                     "rest" if isinstance(e, ast.Constant) and e.value is Ellipsis else "other" for e in (a, b)]
            if sorted(kinds) in (["all", "none"], ["none", "rest"]):
                value_end = code.span(node.value)[1]
                start, end = value_end, code.span(node)[1]
                old = text[start:end]
                parts = [":" if k == "all" else "..." if k == "rest" else "None" for k in reversed(kinds)]
                new = f"[{parts[0]}, {parts[1]}]"
                yield at(node, new, "broadcast", f"`{compact(old)}` → `{new}`", old=old, start_end=(start, end))


def changes_of(text, lines=None):
    """Every distinct mutant of `text` whose change lies on `lines` (1-based; None: every line):
    [(Change, mutated text)], in order of position, without mutants that change nothing or repeat another's text."""
    code = Code(text)
    found, seen = [], {text}
    candidates = sorted(list(token_changes(code)) + list(ast_changes(code)),
                        key=lambda c: (c.line, c.col, c.start, c.end, c.kind, c.new))
    for c in candidates:
        first, last = code.position(c.start)[0], code.position(max(c.start, c.end - 1))[0]
        if lines is not None and not all(n in lines for n in range(first, last + 1)):
            continue
        mutated = text[:c.start] + c.new + text[c.end:]
        if mutated in seen:
            continue
        seen.add(mutated)
        found.append((c, mutated))
    return found


# ── the mutants of a lesson ────────────────────────────────────────────────────────────────────────────
@dataclass(frozen=True)
class Mutant:
    lesson: str
    cell: str           # the grade_id of the learner's cell
    line: int           # 1-based, in the cell as the learner sees it (no BEGIN/END lines)
    col: int
    old: str
    new: str
    kind: str
    description: str
    before: str         # the changed line(s) before and after
    after: str
    source: str         # the whole cell after the change
    functions: tuple    # the functions the cell defines (the checks that need them run first)

    @property
    def id(self):
        return f"{self.lesson}:{self.cell}:{self.line}:{self.col}:{compact(self.old)}→{compact(self.new)}"


def solution_lines(source_cell_text):
    """(the cell as the learner's filled notebook has it, the 1-based numbers of its lines that were inside
    ### BEGIN/END SOLUTION)."""
    kept, inside, region = [], False, set()
    for line in source_cell_text.split("\n"):
        if BEGIN in line:
            inside = True
        elif END in line:
            inside = False
        else:
            kept.append(line)
            if inside:
                region.add(len(kept))
    return "\n".join(kept), region


def defined_functions(text):
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return ()
    return tuple(n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))


def lesson_mutants(lesson):
    """Every mutant of the lesson's reference solution, in cell order then position order."""
    from grader.harness import source_path
    result = []
    for cell in notebook.read(source_path(lesson)).cells:
        if cell.cell_type != "code" or not notebook.is_solution(cell):
            continue
        text, region = solution_lines(cell.source)
        functions = defined_functions(text)
        code = Code(text)
        for c, mutated in changes_of(text, region):
            first, last = code.position(c.start)[0], code.position(max(c.start, c.end - 1))[0]
            new_lines = mutated.split("\n")
            after_last = last + len(new_lines) - len(code.lines)
            result.append(Mutant(lesson, notebook.grade_id(cell), c.line, c.col, c.old, c.shown_new, c.kind,
                                 c.description, "\n".join(code.lines[first - 1:last]),
                                 "\n".join(new_lines[first - 1:after_last]), mutated, functions))
    return result


def sample(mutants, size, seed, lesson):
    """`size` of the mutants, the same ones for the same seed and the same lesson code (in generation order)."""
    if size is None or size >= len(mutants):
        return list(mutants)
    chosen = random.Random(f"{seed}/{lesson}").sample(range(len(mutants)), size)
    return [mutants[i] for i in sorted(chosen)]


def write_notebook(mutant, path, reference=None):
    """The reference-filled notebook with the mutant's cell changed."""
    from grader.__main__ import reference_notebook
    nb = reference if reference is not None else reference_notebook(mutant.lesson)
    nb = nbformat.from_dict(json.loads(json.dumps(nb)))
    cells = [c for c in nb.cells if notebook.is_solution(c) and notebook.grade_id(c) == mutant.cell]
    if len(cells) != 1:
        raise LookupError(f"{mutant.id}: the notebook has {len(cells)} cells with grade_id {mutant.cell!r}")
    cells[0].source = mutant.source
    notebook.write(nb, path)
    return path


# ── equivalents ────────────────────────────────────────────────────────────────────────────────────────
def _without_line(mutant_id):
    lesson, cell, _line, col, change = mutant_id.split(":", 4)
    return lesson, cell, col, change


def is_named(mutant, mutant_id, line=None):
    """Whether `mutant` is the one named by `mutant_id` and (if given) the text of the line it changes: the same id on
    a line of that text, or, after lines above it moved, the same lesson, cell, column and change on such a line."""
    if line is None:
        return mutant.id == mutant_id
    if " ".join(line.split()) != " ".join(mutant.before.split()):
        return False
    return mutant.id == mutant_id or _without_line(mutant.id) == _without_line(mutant_id)


def find_named(mutants, mutant_id, line=None):
    """The mutant named (see is_named), the exact id first; None if there is none."""
    exact = [m for m in mutants if m.id == mutant_id and is_named(m, mutant_id, line)]
    moved = [m for m in mutants if is_named(m, mutant_id, line)]
    return (exact or moved or [None])[0]


def equivalent_entry(mutant, equivalents):
    """The entry of tests/mutation_equivalents.py for this mutant, or None."""
    return next((e for e in equivalents if is_named(mutant, e.id, e.line)), None)


def load_equivalents(mode):
    """The entries that hold in `mode` (an entry with modes=("interpreter",) is equivalent only there)."""
    from tests.mutation_equivalents import EQUIVALENTS
    return [e for e in EQUIVALENTS if e.modes is None or mode in e.modes]


# ── grading ────────────────────────────────────────────────────────────────────────────────────────────
@dataclass
class Verdict:
    id: str
    status: str              # "killed", "survived" or "not graded" (the tool or the grader failed outside a check)
    how: str = ""            # killed: "wrong" (a wrong result), "error" (syntax, compile or run-time error),
                             #         "hang" (time limit), "crash" (the process died)
    check: str = ""          # the check that killed it
    message: str = ""
    seconds: float = 0.0
    checks_run: int = 0
    cpu: float = None        # CPU seconds of the judge and its workers (load-independent); None when the workers
                             # run in bubblewrap, which hides theirs (FA_SANDBOX=off measures it)


def how_killed(message):
    if "timed out after" in message:
        return "hang"
    if "process running your code died" in message:
        return "crash"
    if re.search(r"SyntaxError|CompilationError|while running your code|failed to load|is not defined in the "
                 r"notebook|compiling `|could not be graded", message):
        return "error"
    return "wrong"


def grade(mutant_id, functions, lesson_id, path, mode, timeout):
    """A Verdict for the notebook at `path`: its checks one at a time, stopping at the first that fails."""
    from grader import harness, lessons, structure
    started = time.time()
    lesson = lessons.get(lesson_id)
    runnable = [c for c in lesson.checks if harness.runs_in(c, mode)]
    first = [c for c in runnable if set(c.needs) & set(functions)]
    order = first + [c for c in runnable if c not in first]
    ran = 0
    for check in order:
        report = harness.run_lesson(lesson_id, path, mode, only={check.id}, timeout=timeout)
        ran += 1
        result = report.tests[0]
        if not result.passed:
            return Verdict(mutant_id, "killed", how_killed(result.message), check.id, result.message,
                           time.time() - started, ran)
    # The checks this mode cannot run: judged statically, counted because every check that ran passed
    # (harness.unrunnable_verdict); the same static steps as harness._run_check's.
    source_nb = notebook.read(harness.source_path(lesson_id))
    program, problems = notebook.student_program(notebook.read(path), source_nb)
    functions_found = notebook.function_sources(program)
    tampering = structure.tampering(notebook.student_code(program))
    for check in lesson.checks:
        if check in runnable:
            continue
        problem = harness.static_problems(lesson, check, program, functions_found)
        problem = problem or (tampering and structure.tampering_message(tampering, program))
        problem = problem or structure.check_structure(lesson, check, program)
        if problem:
            return Verdict(mutant_id, "killed", "error" if problems else "wrong", check.id,
                           f"{check.title} [mode: {mode}]: {problem}", time.time() - started, ran)
    return Verdict(mutant_id, "survived", seconds=time.time() - started, checks_run=ran)


def _cpu_seconds():
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _grade_job(job):
    from grader import sandbox
    before = _cpu_seconds()
    try:
        verdict = grade(*job)
    except Exception:  # a bug of this tool or of the grader outside any check: say so, grade the others
        return Verdict(job[0], "not graded", message=traceback.format_exc(limit=3))
    if not sandbox.status()[0]:
        verdict.cpu = _cpu_seconds() - before
    return verdict


def run_jobs(work, jobs, progress=None):
    """{id: Verdict} of grading jobs (id, functions, lesson, notebook path, mode, timeout), `jobs` at once, each in
    a process of its own."""
    verdicts = {}

    def done(verdict):
        verdicts[verdict.id] = verdict
        if progress:
            progress(verdict, len(verdicts), len(work))

    if jobs <= 1:
        for job in work:
            done(_grade_job(job))
    else:
        with futures.ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            for future in futures.as_completed([pool.submit(_grade_job, job) for job in work]):
                done(future.result())
    return verdicts


def grade_all(mutants, mode, jobs, timeout, folder, progress=None):
    """{id: Verdict} of the mutants."""
    from grader.__main__ import reference_notebook
    references, work = {}, []
    for i, m in enumerate(mutants):
        if m.lesson not in references:
            references[m.lesson] = reference_notebook(m.lesson)
        path = write_notebook(m, Path(folder) / f"{m.lesson}-{i:04d}.ipynb", references[m.lesson])
        work.append((m.id, m.functions, m.lesson, str(path), mode, timeout))
    return run_jobs(work, jobs, progress)


def grade_references(lesson_ids, mode, jobs, timeout, folder, progress=None):
    """{lesson: Verdict} of each lesson's unchanged reference-filled notebook, graded the same way. A reference
    that fails a check (a lesson being edited, course/ not rebuilt) would make every mutant look killed."""
    from grader.__main__ import reference_notebook
    work = []
    for lesson in lesson_ids:
        path = Path(folder) / f"{lesson}-reference.ipynb"
        notebook.write(reference_notebook(lesson), path)
        work.append((f"{lesson}:reference", (), lesson, str(path), mode, timeout))
    verdicts = run_jobs(work, jobs, progress)
    return {v.id.split(":")[0]: v for v in verdicts.values()}


# ── the report ─────────────────────────────────────────────────────────────────────────────────────────
@dataclass
class LessonScore:
    lesson: str
    generated: int = 0
    graded: int = 0
    killed: int = 0
    how: Counter = field(default_factory=Counter)
    by_check: Counter = field(default_factory=Counter)
    survived: list = field(default_factory=list)          # (mutant, verdict)
    equivalent: list = field(default_factory=list)        # (mutant, entry)
    equivalent_killed: list = field(default_factory=list)  # (mutant, entry, verdict): an entry that is wrong
    not_graded: list = field(default_factory=list)         # (mutant, verdict): grading itself failed
    seconds: float = 0.0
    cpu: float = 0.0
    cpu_unknown: bool = False

    def summary(self):
        how = ", ".join(f"{self.how[k]} {k}" for k in ("error", "hang", "crash") if self.how[k])
        failed = f" ({len(self.not_graded)} could not be graded)" if self.not_graded else ""
        counted = self.graded - len(self.equivalent)
        score = f"{100 * self.killed / counted:.1f} % ({self.killed}/{counted})" if counted else "-"
        cpu = "" if self.cpu_unknown or not self.graded else f", {self.cpu / 60:.1f} CPU-min"
        return (f"{self.lesson}: {self.generated} generated, {self.graded} graded{failed}, {self.killed} killed"
                + (f" (of which {how})" if how else "") + f", {len(self.survived)} survived, "
                f"{len(self.equivalent)} equivalent: score {score} [{self.seconds / 60:.1f} min of grading{cpu}]")


def score_lessons(generated, graded, verdicts, equivalents):
    scores = {}
    for lesson, mutants in generated.items():
        s = scores[lesson] = LessonScore(lesson, generated=len(mutants))
        for m in graded.get(lesson, []):
            v = verdicts[m.id]
            if v.status == "not graded":
                s.not_graded.append((m, v))
                continue
            s.graded += 1
            s.seconds += v.seconds
            s.cpu += v.cpu or 0.0
            s.cpu_unknown |= v.cpu is None
            entry = equivalent_entry(m, equivalents)
            if entry and v.status == "survived":
                s.equivalent.append((m, entry))
            elif v.status == "killed":
                s.killed += 1
                s.how[v.how] += 1
                s.by_check[v.check] += 1
                if entry:
                    s.equivalent_killed.append((m, entry, v))
            else:
                s.survived.append((m, v))
    return scores


def stale_equivalents(generated, equivalents):
    """Entries of tests/mutation_equivalents.py for the lessons generated that match no mutant any more."""
    matched = {id(equivalent_entry(m, equivalents)) for ms in generated.values() for m in ms}
    return [e for e in equivalents if e.id.split(":", 1)[0] in generated and id(e) not in matched]


def indent(text, prefix="      "):
    return "\n".join(prefix + line for line in text.split("\n"))


def report_lines(scores, mode, command, stale, missing_ids):
    lines = [f"# {command}",
             f"# Mutation score, mode {mode}: one-token changes of each lesson's reference solution (the lines inside "
             "### BEGIN/END SOLUTION), each graded like a submission; score = killed / (graded − equivalent).",
             "# killed \"error\": a syntax, compile or run-time error; \"hang\": the time limit; \"crash\": the "
             "process died. Survivors get full marks: each needs a new or sharper check, or an entry (with the "
             "reason) in tests/mutation_equivalents.py.", ""]
    lines += [s.summary() for s in scores.values()]
    total = LessonScore("all lessons")
    for s in scores.values():
        total.generated += s.generated
        total.graded += s.graded
        total.killed += s.killed
        total.how.update(s.how)
        total.survived += s.survived
        total.not_graded += s.not_graded
        total.equivalent += s.equivalent
        total.seconds += s.seconds
        total.cpu += s.cpu
        total.cpu_unknown |= s.cpu_unknown
    lines.append(total.summary())
    for s in scores.values():
        lines += ["", f"## {s.lesson} (mode {mode})", s.summary(),
                  "killed by: " + (", ".join(f"{c} {n}" for c, n in s.by_check.most_common()) or "-")]
        for m, v in s.survived:
            lines += [f"  SURVIVED {m.id}  {m.kind}: {m.description} ({v.checks_run} checks, {v.seconds:.0f} s)",
                      "    before:", indent(m.before), "    after:", indent(m.after)]
        for m, entry in s.equivalent:
            lines += [f"  EQUIVALENT {m.id}  {m.kind}: {m.description}", f"    why: {entry.why}",
                      "    before:", indent(m.before), "    after:", indent(m.after)]
        for m, v in s.not_graded:
            lines += [f"  NOT GRADED {m.id}: grading failed outside any check:", indent(v.message.strip())]
        for m, entry, v in s.equivalent_killed:
            lines += [f"  LISTED AS EQUIVALENT BUT KILLED {m.id} by {v.check} ({v.how}): remove it from "
                      f"tests/mutation_equivalents.py (it was: {entry.why})"]
    if stale:
        lines += ["", "Entries of tests/mutation_equivalents.py that match no mutant any more (the line changed):"]
        lines += [f"  STALE {e.id}  line: {e.line}" for e in stale]
    if missing_ids:
        lines += ["", "Ids asked for (--only-ids) that no mutant has any more (the lesson changed):"]
        lines += [f"  MISSING {i}" for i in missing_ids]
    return lines


def grading_fingerprint(lesson):
    """A hash of everything that decides a mutant's verdict in `lesson`: its source notebook, its checks, and the
    grader's judge and worker. A verdict saved under another fingerprint is not reused (the checks changed)."""
    import hashlib
    from grader import harness
    files = [harness.source_path(lesson), ROOT / "grader" / "lessons" / f"lesson{lesson}.py",
             ROOT / "grader" / "lessons" / "memory_safety.py"]
    files += [ROOT / "grader" / name for name in ("harness.py", "processes.py", "worker.py", "wire.py", "sandbox.py", "structure.py",
                                                 "notebook.py")]
    digest = hashlib.sha256()
    for f in files:
        digest.update(Path(f).read_bytes())
    return digest.hexdigest()[:16]


def save_verdicts(path, verdicts, mutants, mode):
    """Every verdict as JSON, with the fingerprint of its lesson's grading, for --reuse-verdicts."""
    by_lesson = {}
    for m in mutants:
        if m.id in verdicts and verdicts[m.id].status != "not graded":
            by_lesson.setdefault(m.lesson, {})[m.id] = vars(verdicts[m.id])
    import platform
    import torch
    import triton
    where = f"{platform.node()}, {os.cpu_count()} CPUs, torch {torch.__version__}, triton {triton.__version__}"
    saved = {lesson: {"fingerprint": grading_fingerprint(lesson), "mode": mode, "graded_on": where, "verdicts": v}
             for lesson, v in by_lesson.items()}
    Path(path).write_text(json.dumps(saved, ensure_ascii=False, indent=0), encoding="utf-8")


def reused_verdicts(paths, mode):
    """{id: Verdict} from files of save_verdicts whose lesson's fingerprint is today's (others are graded again),
    and a line for the report about each file."""
    reused, notes = {}, []
    for path in paths:
        for lesson, saved in json.loads(Path(path).read_text(encoding="utf-8")).items():
            if saved["mode"] != mode or saved["fingerprint"] != grading_fingerprint(lesson):
                notes.append(f"# {Path(path).name}: {lesson}'s verdicts not reused (mode {saved['mode']}, fingerprint "
                             f"{saved['fingerprint']}: its grading changed since)")
                continue
            reused.update({i: Verdict(**v) for i, v in saved["verdicts"].items()})
            notes.append(f"# {Path(path).name}: {len(saved['verdicts'])} verdicts of {lesson} reused, graded on "
                         f"{saved.get('graded_on', '?')} (fingerprint {saved['fingerprint']}: the same notebook, "
                         "checks and grader)")
    return reused, notes


def read_ids(path):
    """[(id, line text or None)]: one mutant a line, its id, then (optional, after whitespace) the text of the line it
    changes, as --survivors-out writes them (so that an id still finds its mutant after lines above it moved);
    blank lines and # comments skipped."""
    ids = []
    for line in Path(path).read_text(encoding="utf-8").split("\n"):
        line = line.strip()
        if line and not line.startswith("#"):
            parts = line.split(None, 1)
            ids.append((parts[0], parts[1] if len(parts) > 1 else None))
    return ids


def default_lessons():
    """Every lesson with a Triton kernel, plus the PyTorch lessons 01 and 02."""
    from grader import lessons
    return [l for l in lessons.LESSONS if lessons.get(l).kernels or l[:2] in ("01", "02")]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mode", default="interpreter", choices=["interpreter", "gpu", "structure"])
    parser.add_argument("--lessons", nargs="*", help="default: every lesson with a kernel, and 01 and 02")
    parser.add_argument("--jobs", type=int, default=1, help="mutants graded at once, each in its own process")
    parser.add_argument("--sample", type=int, help="grade only N mutants per lesson (chosen by --seed)")
    parser.add_argument("--seed", type=int, default=0, help="which sample (default 0): the same seed, the same mutants")
    parser.add_argument("--only-ids", help="grade only the mutants whose ids this file lists (one per line, first "
                                           "field), e.g. the survivors of an interpreter run, on a GPU")
    parser.add_argument("--timeout", type=float,
                        help="seconds per check; longer is a hang (default 120, in gpu mode each check's own limit)")
    parser.add_argument("--out", help="write the report here too")
    parser.add_argument("--survivors-out", help="write the survivors' ids here (equivalents included), for --only-ids")
    parser.add_argument("--trust-reference", action="store_true",
                        help="skip grading each lesson's unchanged reference first (tests/test_lessons.py does it)")
    parser.add_argument("--list", action="store_true", help="list the mutants (id and description); grade nothing")
    parser.add_argument("--save-verdicts", help="write every verdict here (JSON), for --reuse-verdicts")
    parser.add_argument("--reuse-verdicts", nargs="*", default=[],
                        help="verdicts saved by --save-verdicts (say, on a machine with more cores) that need no "
                             "grading again: those whose lesson's notebook, checks and grader are unchanged")
    args = parser.parse_args(argv)
    if args.timeout is None and args.mode != "gpu":
        args.timeout = 120
    chosen_lessons = args.lessons or default_lessons()
    from grader import lessons
    for lesson in chosen_lessons:
        lessons.get(lesson)  # an unknown lesson: a clear message and exit
    if args.only_ids:
        wanted = read_ids(args.only_ids)
        if not args.lessons:
            chosen_lessons = [l for l in chosen_lessons if any(i.startswith(l + ":") for i, _ in wanted)]
    generated = {lesson: lesson_mutants(lesson) for lesson in chosen_lessons}
    missing = []
    if args.only_ids:
        graded = {l: [] for l in generated}
        for mutant_id, line in wanted:
            found = find_named(generated.get(mutant_id.split(":", 1)[0], []), mutant_id, line)
            if found is None:
                missing.append(mutant_id)
            elif found not in graded[found.lesson]:
                graded[found.lesson].append(found)
    else:
        graded = {l: sample(ms, args.sample, args.seed, l) for l, ms in generated.items()}
    if args.list:
        for lesson, ms in graded.items():
            for m in ms:
                print(f"{m.id}\t{m.kind}: {m.description}\t| {m.before.strip()}  ⇒  {m.after.strip()}")
        print(f"{sum(map(len, graded.values()))} of {sum(map(len, generated.values()))} mutants", file=sys.stderr)
        for mutant_id in missing:
            print(f"no mutant any more: {mutant_id}", file=sys.stderr)
        return 0
    equivalents = load_equivalents(args.mode)
    reused, reuse_notes = reused_verdicts(args.reuse_verdicts, args.mode)
    todo = [m for ms in graded.values() for m in ms if m.id not in reused]
    started = time.time()
    print(f"grading {len(todo)} mutants of {len(graded)} lessons in {args.mode} mode, {args.jobs} at once",
          file=sys.stderr, flush=True)

    collected = {}

    def progress(verdict, done, total):
        if args.save_verdicts:  # as they come: a run stopped by a time limit keeps what it graded
            collected[verdict.id] = verdict
            save_verdicts(args.save_verdicts, collected, [m for ms in graded.values() for m in ms], args.mode)
        first_line = verdict.message.strip().split("\n")[0]
        last_line = verdict.message.strip().split("\n")[-1]
        tail = (f"killed by {verdict.check} ({verdict.how}): {first_line[:160]}" if verdict.status == "killed" else
                "SURVIVED" if verdict.status == "survived" else f"NOT GRADED: {last_line}")
        if verdict.id.endswith(":reference"):  # the unchanged reference solution
            tail = "full marks" if verdict.status == "survived" else "FAILS " + tail
        print(f"[{done}/{total} {(time.time() - started) / 60:.1f} min] {verdict.id}: {tail} ({verdict.seconds:.0f} s"
              + (")" if verdict.cpu is None else f", {verdict.cpu:.0f} CPU-s)"),
              file=sys.stderr, flush=True)

    broken = {}
    with tempfile.TemporaryDirectory(prefix="mutation-") as folder:
        if not args.trust_reference:
            checked = grade_references([l for l, ms in graded.items() if ms], args.mode, args.jobs, args.timeout,
                                       folder, progress)
            broken = {l: v for l, v in checked.items() if v.status != "survived"}
            todo = [m for m in todo if m.lesson not in broken]
        verdicts = {**reused, **grade_all(todo, args.mode, args.jobs, args.timeout, folder, progress)}
    for lesson, v in broken.items():
        print(f"{lesson}: its reference solution fails {v.check or 'grading'}, so its mutants were not graded "
              f"(rebuild course/ with `python -m grader build --lesson {lesson}`, or fix the lesson):\n{v.message}",
              file=sys.stderr)
    graded = {l: ([] if l in broken else ms) for l, ms in graded.items()}
    scores = score_lessons(generated, graded, verdicts, equivalents)
    command = "python tests/mutation.py " + " ".join(argv if argv is not None else sys.argv[1:])
    lines = report_lines(scores, args.mode, command, stale_equivalents(generated, equivalents), missing)
    lines[1:1] = reuse_notes
    lines += [f"REFERENCE FAILS {lesson}: {v.check or 'grading'}: {v.message.strip().splitlines()[0][:300]} (its "
              "mutants were not graded)" for lesson, v in broken.items()]
    lines.append(f"# {len(todo)} mutants graded in {(time.time() - started) / 60:.1f} min of wall time "
                 f"({args.jobs} at once)")
    print("\n".join(lines))
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    if args.save_verdicts:  # what this run graded, not what it reused: each file says truly where it was graded
        save_verdicts(args.save_verdicts, {k: v for k, v in verdicts.items() if k not in reused},
                      [m for ms in graded.values() for m in ms], args.mode)
    if args.survivors_out:
        found = [f"{m.id}\t{' '.join(m.before.split())}\n"
                 for s in scores.values() for m, _ in s.survived + s.equivalent]
        Path(args.survivors_out).write_text(
            f"# survivors of {command} (id, then the line it changes), for --only-ids\n" + "".join(found),
            encoding="utf-8")
    return 1 if broken or any(s.survived or s.not_graded for s in scores.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
