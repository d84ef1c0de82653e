"""Problem directories in the SOL-ExecBench / FlashInfer-Bench schema (definition.json + workload.jsonl),
read without PyTorch: axes (const, var, expr), tensor specs, workload input descriptors, constraints and
the source key that names the problem's reference data.

Everything here is checked as it is read, and every error is a `ProblemError` whose message is one line
naming the file, the line (for workload.jsonl) and the field, so that a command-line tool can print it as
it is. The rules follow the schema documents of NVIDIA/SOL-ExecBench (docs/definition.md, docs/workload.md)
and kiln's C reader (src/formats/problem.h): the two must agree on what a problem means.

Axis expressions are integer expressions in Python syntax over axis names, evaluated on the parsed tree
(never with eval): integers, names, + - * / // % ** and unary +/-, parentheses, and the functions min,
max and ceil_div. As in kiln's C evaluator (src/formats/expr.h) `/` is floor division like `//`, `%`
takes the sign of the divisor, and results must fit in int64.
"""

from __future__ import annotations

import ast
import json
import os
from dataclasses import dataclass, field
from typing import Any, Optional

DEFINITION_FILE = "definition.json"
WORKLOAD_FILE = "workload.jsonl"

# The dtype names of the schema (plus uint8, which kiln's C side also knows).
DTYPES = (
    "float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "float4_e2m1",
    "float4_e2m1fn_x2", "int64", "int32", "int16", "int8", "uint8", "bool",
)
INPUT_KINDS = ("random", "scalar", "safetensors", "custom")
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class ProblemError(Exception):
    """A problem directory that does not follow the schema; the message is one line for the user."""


# ---------------------------------------------------------------------------------------------------
# The source key: FNV-1a 64 over definition.json bytes followed by workload.jsonl bytes.

FNV64_OFFSET_BASIS = 0xCBF29CE484222325
FNV64_PRIME = 0x100000001B3


def fnv1a64(data: bytes, state: int = FNV64_OFFSET_BASIS) -> int:
    """FNV-1a 64 of data, continuing from state (so that two buffers hash as their concatenation)."""
    h = state
    for byte in data:
        h = ((h ^ byte) * FNV64_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h


def fnv1a64_hex(data: bytes) -> str:
    """FNV-1a 64 of data as 16 lowercase hex digits, the way kiln's C side prints a source key."""
    return "%016x" % fnv1a64(data)


# ---------------------------------------------------------------------------------------------------
# Safe integer expressions (expr axes) and constraints.


class ExprError(Exception):
    """An expression that cannot be evaluated; the message says why."""


def _check_int64(value: int) -> int:
    if not INT64_MIN <= value <= INT64_MAX:
        raise ExprError("result does not fit in int64")
    return value


def _floor_div(a: int, b: int) -> int:
    if b == 0:
        raise ExprError("division by zero")
    return a // b


def _mod(a: int, b: int) -> int:
    if b == 0:
        raise ExprError("modulo by zero")
    return a % b


def _power(a: int, b: int) -> int:
    if b < 0:
        raise ExprError("negative exponent")
    if b > 64 and a not in (-1, 0, 1):
        raise ExprError("result does not fit in int64")
    return a**b


def _ceil_div(a: int, b: int) -> int:
    if b == 0:
        raise ExprError("division by zero")
    return -((-a) // b)


_BINARY = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: _floor_div,
    ast.FloorDiv: _floor_div,
    ast.Mod: _mod,
    ast.Pow: _power,
}
_FUNCTIONS = {"min": min, "max": max, "ceil_div": _ceil_div}
_COMPARE = {
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
}


def _eval_node(node: ast.AST, values: dict[str, int], allow_logic: bool) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return _check_int64(node.value)
    if isinstance(node, ast.Name):
        if node.id not in values:
            raise ExprError(f"unknown name '{node.id}'")
        return values[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        operand = _eval_node(node.operand, values, allow_logic)
        return _check_int64(-operand if isinstance(node.op, ast.USub) else operand)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left = _eval_node(node.left, values, allow_logic)
        right = _eval_node(node.right, values, allow_logic)
        return _check_int64(_BINARY[type(node.op)](left, right))
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in _FUNCTIONS and len(node.args) == 2 and not node.keywords):
        args = [_eval_node(a, values, allow_logic) for a in node.args]
        return _check_int64(_FUNCTIONS[node.func.id](*args))
    if allow_logic and isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
        left = _eval_node(node.left, values, allow_logic)
        for op, comparator in zip(node.ops, node.comparators):
            right = _eval_node(comparator, values, allow_logic)
            if not _COMPARE[type(op)](left, right):
                return 0
            left = right
        return 1
    if allow_logic and isinstance(node, ast.BoolOp):
        results = [_eval_node(v, values, allow_logic) for v in node.values]
        return int(all(results) if isinstance(node.op, ast.And) else any(results))
    if allow_logic and isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return int(not _eval_node(node.operand, values, allow_logic))
    raise ExprError(f"unsupported syntax '{ast.unparse(node)}'")


def _parse_expression(text: str) -> ast.AST:
    try:
        return ast.parse(text.strip(), mode="eval").body
    except SyntaxError as e:
        raise ExprError(f"syntax error: {e.msg}") from None


def eval_int_expr(text: str, values: dict[str, int]) -> int:
    """Evaluates an axis expression over values (axis name -> int). Raises ExprError."""
    return _eval_node(_parse_expression(text), values, allow_logic=False)


def eval_constraint(text: str, values: dict[str, int]) -> bool:
    """Evaluates a constraint (comparisons, and/or/not over axis expressions). Raises ExprError."""
    return bool(_eval_node(_parse_expression(text), values, allow_logic=True))


def expression_names(text: str) -> set[str]:
    """The names an expression refers to (function names excluded)."""
    tree = _parse_expression(text)
    calls = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) not in calls}


# ---------------------------------------------------------------------------------------------------
# The model of a problem.


@dataclass
class Axis:
    name: str
    kind: str  # "const" | "var" | "expr"
    value: Optional[int] = None  # const axes
    expression: Optional[str] = None  # expr axes


@dataclass
class TensorSpec:
    name: str
    dtype: str
    shape: Optional[list[str]]  # None: a Python scalar; []: a 0-d tensor

    @property
    def is_scalar(self) -> bool:
        return self.shape is None


@dataclass
class InputDesc:
    kind: str  # one of INPUT_KINDS
    value: Any = None  # scalar
    path: Optional[str] = None  # safetensors
    tensor_key: Optional[str] = None  # safetensors


@dataclass
class Workload:
    index: int  # position among the workloads, from 0
    line: int  # line in workload.jsonl, from 1
    uuid: str
    given_axes: dict[str, int]  # the axes as the workload line binds them
    axes: dict[str, int]  # every axis resolved, in definition order
    inputs: dict[str, InputDesc]  # in definition order
    tolerance: Optional[dict] = None
    # kiln's inputs drawn from statistics: {name: {"stats", "structure", "slice"}} for `random` inputs
    # that stand for a real tensor too big to keep (docs/formats.md, "Inputs drawn from statistics")
    drawn: dict = field(default_factory=dict)
    kiln: dict = field(default_factory=dict)  # the line's "kiln" object as it is

    @property
    def label(self) -> str:
        return f"workload line {self.line} (uuid {self.uuid})"


@dataclass
class Problem:
    dir: str
    name: str
    op_type: Optional[str]
    axes: dict[str, Axis]
    inputs: dict[str, TensorSpec]
    outputs: dict[str, TensorSpec]
    reference: str
    custom_inputs_entrypoint: Optional[str]
    constraints: list[str]
    workloads: list[Workload]
    source_key: str  # fnv1a64_hex(definition.json bytes + workload.jsonl bytes)
    kiln: dict = field(default_factory=dict)  # kiln's namespaced additions, kept as read
    unchecked_constraints: list[str] = field(default_factory=list)

    @property
    def definition_path(self) -> str:
        return os.path.join(self.dir, DEFINITION_FILE)

    @property
    def workload_path(self) -> str:
        return os.path.join(self.dir, WORKLOAD_FILE)

    def shape(self, spec: TensorSpec, workload: Workload) -> Optional[tuple[int, ...]]:
        """The concrete shape of a tensor in a workload (None for scalars)."""
        if spec.shape is None:
            return None
        return tuple(int(d) if d.isdigit() else workload.axes[d] for d in spec.shape)


# ---------------------------------------------------------------------------------------------------
# Reading definition.json.


def _is_int(v: Any) -> bool:
    return type(v) is int


def _need(obj: dict, key: str, types: tuple, where: str, what: str) -> Any:
    if key not in obj:
        raise ProblemError(f"{where}: field '{key}' is missing")
    value = obj[key]
    if not isinstance(value, types):
        raise ProblemError(f"{where}: field '{key}' must be {what}")
    return value


def _parse_axes(raw: Any, where: str) -> dict[str, Axis]:
    if not isinstance(raw, dict):
        raise ProblemError(f"{where}: field 'axes' must be an object")
    axes: dict[str, Axis] = {}
    for name, spec in raw.items():
        at = f"{where}: axis '{name}'"
        if not name.isidentifier():
            raise ProblemError(f"{at}: the name must be an identifier")
        if not isinstance(spec, dict):
            raise ProblemError(f"{at}: must be an object")
        kind = spec.get("type")
        if kind == "const":
            value = spec.get("value")
            if not _is_int(value) or value < 0:
                raise ProblemError(f"{at}: 'value' must be a non-negative integer")
            axes[name] = Axis(name, "const", value=value)
        elif kind == "var":
            axes[name] = Axis(name, "var")
        elif kind == "expr":
            text = spec.get("expression")
            if not isinstance(text, str) or not text.strip():
                raise ProblemError(f"{at}: 'expression' must be a non-empty string")
            axes[name] = Axis(name, "expr", expression=text)
        else:
            raise ProblemError(f"{at}: 'type' must be \"const\", \"var\" or \"expr\", not {json.dumps(kind)}")
    for axis in axes.values():
        if axis.kind != "expr":
            continue
        try:
            names = expression_names(axis.expression)
        except ExprError as e:
            raise ProblemError(f"{where}: axis '{axis.name}': expression '{axis.expression}': {e}") from None
        unknown = sorted(names - set(axes))
        if unknown:
            raise ProblemError(f"{where}: axis '{axis.name}': expression '{axis.expression}' names "
                               f"unknown axis '{unknown[0]}'")
    return axes


def _parse_tensors(raw: Any, axes: dict[str, Axis], where: str, field_name: str) -> dict[str, TensorSpec]:
    if not isinstance(raw, dict):
        raise ProblemError(f"{where}: field '{field_name}' must be an object")
    specs: dict[str, TensorSpec] = {}
    for name, spec in raw.items():
        at = f"{where}: {field_name[:-1]} '{name}'"
        if not isinstance(spec, dict):
            raise ProblemError(f"{at}: must be an object")
        dtype = spec.get("dtype")
        if dtype not in DTYPES:
            raise ProblemError(f"{at}: unknown dtype {json.dumps(dtype)} (known: {', '.join(DTYPES)})")
        if "shape" not in spec:
            raise ProblemError(f"{at}: field 'shape' is missing (use null for a scalar)")
        shape = spec["shape"]
        if shape is not None:
            if not isinstance(shape, list) or not all(isinstance(d, str) for d in shape):
                raise ProblemError(f"{at}: 'shape' must be a list of axis names or null")
            for d in shape:
                if not d.isdigit() and d not in axes:
                    raise ProblemError(f"{at}: shape names unknown axis '{d}'")
        specs[name] = TensorSpec(name, dtype, shape)
    return specs


def _check_reference_source(source: str, entrypoint: Optional[str], n_inputs: int, where: str) -> None:
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise ProblemError(f"{where}: field 'reference' is not valid Python "
                           f"(line {e.lineno}: {e.msg})") from None
    functions = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    run = functions.get("run")
    if run is None:
        raise ProblemError(f"{where}: field 'reference' defines no top-level function run()")
    params = run.args.posonlyargs + run.args.args
    if run.args.vararg is None and len(params) != n_inputs:
        raise ProblemError(f"{where}: reference run() takes {len(params)} parameter(s) but the definition "
                           f"has {n_inputs} input(s)")
    if entrypoint is not None and entrypoint not in functions:
        raise ProblemError(f"{where}: custom_inputs_entrypoint '{entrypoint}' is not a top-level function "
                           f"of the reference")


def _load_json_file(path: str) -> tuple[bytes, Any]:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise ProblemError(f"{path}: no such file") from None
    except OSError as e:
        raise ProblemError(f"{path}: cannot read: {e.strerror}") from None
    try:
        return data, json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ProblemError(f"{path}: bad JSON: {e}") from None


# ---------------------------------------------------------------------------------------------------
# Reading workload.jsonl.


def resolve_axes(axes: dict[str, Axis], given: dict[str, int]) -> dict[str, int]:
    """Every axis value for a workload: consts, the given vars, then exprs (in dependency order).
    Raises ExprError when an expression cannot be evaluated."""
    values = {a.name: a.value for a in axes.values() if a.kind == "const"}
    values.update({k: v for k, v in given.items() if axes[k].kind == "var"})
    pending = [a for a in axes.values() if a.kind == "expr"]
    while pending:
        ready = [a for a in pending if expression_names(a.expression) <= set(values)]
        if not ready:
            raise ExprError(f"axis '{pending[0].name}': expressions refer to each other in a cycle")
        for a in ready:
            try:
                values[a.name] = eval_int_expr(a.expression, values)
            except ExprError as e:
                raise ExprError(f"axis '{a.name}' = '{a.expression}': {e}") from None
            if values[a.name] < 0:
                raise ExprError(f"axis '{a.name}' = '{a.expression}' is negative ({values[a.name]})")
        pending = [a for a in pending if a not in ready]
    return {name: values[name] for name in axes}


def _parse_input_desc(name: str, spec: TensorSpec, raw: Any, at: str) -> InputDesc:
    at = f"{at}: input '{name}'"
    if not isinstance(raw, dict):
        raise ProblemError(f"{at}: the descriptor must be an object")
    kind = raw.get("type")
    if kind not in INPUT_KINDS:
        raise ProblemError(f"{at}: unknown input type {json.dumps(kind)} "
                           f"(known: {', '.join(INPUT_KINDS)})")
    if kind == "scalar":
        value = raw.get("value")
        if not isinstance(value, (int, float, bool)):
            raise ProblemError(f"{at}: a scalar descriptor needs a numeric or boolean 'value'")
        if spec.shape:
            raise ProblemError(f"{at}: a scalar descriptor cannot fill a tensor of shape {spec.shape}")
        return InputDesc("scalar", value=value)
    if kind == "safetensors":
        path, key = raw.get("path"), raw.get("tensor_key")
        if not isinstance(path, str) or not path:
            raise ProblemError(f"{at}: a safetensors descriptor needs a non-empty 'path'")
        if not isinstance(key, str) or not key:
            raise ProblemError(f"{at}: a safetensors descriptor needs a non-empty 'tensor_key'")
        if spec.is_scalar:
            raise ProblemError(f"{at}: a safetensors descriptor cannot fill a scalar (shape null)")
        return InputDesc("safetensors", path=path, tensor_key=key)
    return InputDesc(kind)


def _parse_workload(obj: Any, problem: Problem, index: int, line: int, where: str) -> Workload:
    if isinstance(obj, dict) and isinstance(obj.get("workload"), dict):
        named = obj.get("definition")
        if named is not None and named != problem.name:
            raise ProblemError(f"{where}: 'definition' is {json.dumps(named)} but definition.json is "
                               f"named {json.dumps(problem.name)}")
        obj = obj["workload"]
    if not isinstance(obj, dict):
        raise ProblemError(f"{where}: a workload must be a JSON object")
    uuid = obj.get("uuid")
    if not isinstance(uuid, str) or not uuid:
        raise ProblemError(f"{where}: field 'uuid' must be a non-empty string")
    at = f"{where} (uuid {uuid})"

    given = obj.get("axes", {})
    if not isinstance(given, dict):
        raise ProblemError(f"{at}: field 'axes' must be an object")
    for name, value in given.items():
        if name not in problem.axes:
            raise ProblemError(f"{at}: axes: unknown axis '{name}'")
        if not _is_int(value) or value < 0:
            raise ProblemError(f"{at}: axes: '{name}' must be a non-negative integer")
        axis = problem.axes[name]
        if axis.kind == "const" and value != axis.value:
            raise ProblemError(f"{at}: axes: '{name}' is const {axis.value} in the definition, not {value}")
    for axis in problem.axes.values():
        if axis.kind == "var" and axis.name not in given:
            raise ProblemError(f"{at}: axes: var axis '{axis.name}' is not bound")
    try:
        axes = resolve_axes(problem.axes, given)
    except ExprError as e:
        raise ProblemError(f"{at}: {e}") from None
    for name, value in given.items():
        if problem.axes[name].kind == "expr" and axes[name] != value:
            raise ProblemError(f"{at}: axes: '{name}' = {value} but its expression gives {axes[name]}")

    raw_inputs = obj.get("inputs")
    if not isinstance(raw_inputs, dict):
        raise ProblemError(f"{at}: field 'inputs' must be an object")
    for name in raw_inputs:
        if name not in problem.inputs:
            raise ProblemError(f"{at}: inputs: unknown input '{name}'")
    inputs: dict[str, InputDesc] = {}
    for name, spec in problem.inputs.items():
        if name not in raw_inputs:
            raise ProblemError(f"{at}: inputs: input '{name}' has no descriptor")
        inputs[name] = _parse_input_desc(name, spec, raw_inputs[name], at)
    kinds = {d.kind for d in inputs.values()}
    if "custom" in kinds:
        if kinds != {"custom"}:
            raise ProblemError(f"{at}: inputs: 'custom' inputs cannot be mixed with other types")
        if problem.custom_inputs_entrypoint is None:
            raise ProblemError(f"{at}: inputs are 'custom' but the definition has no "
                               f"custom_inputs_entrypoint")

    for text in problem.constraints:
        try:
            ok = eval_constraint(text, axes)
        except ExprError:
            if text not in problem.unchecked_constraints:
                problem.unchecked_constraints.append(text)
            continue
        if not ok:
            raise ProblemError(f"{at}: constraint '{text}' does not hold for axes {axes}")

    tolerance = obj.get("tolerance")
    kiln = obj.get("kiln") if isinstance(obj.get("kiln"), dict) else {}
    drawn = _parse_drawn(kiln.get("drawn"), inputs, at)
    return Workload(index, line, uuid, dict(given), axes, inputs,
                    tolerance if isinstance(tolerance, dict) else None, drawn, kiln)


def _parse_drawn(raw: Any, inputs: dict[str, InputDesc], at: str) -> dict:
    """kiln.drawn of a workload line: statistics (and a real slice) of `random` inputs."""
    if raw is None:
        return {}
    at = f"{at}: kiln.drawn"
    if not isinstance(raw, dict):
        raise ProblemError(f"{at} must be an object")
    for name, entry in raw.items():
        where = f"{at}: '{name}'"
        if name not in inputs:
            raise ProblemError(f"{where}: not an input")
        if inputs[name].kind != "random":
            raise ProblemError(f"{where}: the input's descriptor is {inputs[name].kind}, not random")
        if not isinstance(entry, dict) or not isinstance(entry.get("stats"), dict):
            raise ProblemError(f"{where}: needs a \"stats\" object")
        if "structure" in entry and not isinstance(entry["structure"], dict):
            raise ProblemError(f"{where}: \"structure\" must be an object")
        sl = entry.get("slice")
        if sl is not None:
            if not isinstance(sl, dict) or not isinstance(sl.get("path"), str) or not sl["path"] \
                    or not isinstance(sl.get("tensor_key"), str) or not _is_int(sl.get("elements")) \
                    or sl["elements"] < 1:
                raise ProblemError(f"{where}: \"slice\" needs a 'path', a 'tensor_key' and 'elements' >= 1")
    return raw


def _parse_workloads(data: bytes, problem: Problem, path: str) -> list[Workload]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ProblemError(f"{path}: not UTF-8 text: {e}") from None
    workloads: list[Workload] = []
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{line_no}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise ProblemError(f"{where}: bad JSON: {e}") from None
        workloads.append(_parse_workload(obj, problem, len(workloads), line_no, where))
    if not workloads:
        raise ProblemError(f"{path}: no workloads")
    return workloads


# ---------------------------------------------------------------------------------------------------


def load_problem(problem_dir: str) -> Problem:
    """Loads PROBLEM_DIR/definition.json and PROBLEM_DIR/workload.jsonl. Raises ProblemError."""
    if not os.path.isdir(problem_dir):
        raise ProblemError(f"{problem_dir}: not a directory")
    def_path = os.path.join(problem_dir, DEFINITION_FILE)
    wl_path = os.path.join(problem_dir, WORKLOAD_FILE)
    def_bytes, d = _load_json_file(def_path)
    try:
        with open(wl_path, "rb") as f:
            wl_bytes = f.read()
    except FileNotFoundError:
        raise ProblemError(f"{wl_path}: no such file") from None
    except OSError as e:
        raise ProblemError(f"{wl_path}: cannot read: {e.strerror}") from None

    where = def_path
    if not isinstance(d, dict):
        raise ProblemError(f"{where}: the definition must be a JSON object")
    name = _need(d, "name", (str,), where, "a string")
    op_type = d.get("op_type")
    axes = _parse_axes(_need(d, "axes", (dict,), where, "an object"), where)
    inputs = _parse_tensors(_need(d, "inputs", (dict,), where, "an object"), axes, where, "inputs")
    outputs = _parse_tensors(_need(d, "outputs", (dict,), where, "an object"), axes, where, "outputs")
    for n in set(inputs) & set(outputs):
        raise ProblemError(f"{where}: '{n}' is both an input and an output")
    for n in inputs:
        if n in axes:
            raise ProblemError(f"{where}: input '{n}' has the name of an axis")
    reference = _need(d, "reference", (str,), where, "a string")
    entrypoint = d.get("custom_inputs_entrypoint")
    if entrypoint is not None and (not isinstance(entrypoint, str) or not entrypoint.isidentifier()):
        raise ProblemError(f"{where}: field 'custom_inputs_entrypoint' must be a function name or null")
    _check_reference_source(reference, entrypoint, len(inputs), where)
    constraints = d.get("constraints") or []
    if not isinstance(constraints, list) or not all(isinstance(c, str) for c in constraints):
        raise ProblemError(f"{where}: field 'constraints' must be a list of strings")
    for c in constraints:
        try:
            _parse_expression(c)
        except ExprError as e:
            raise ProblemError(f"{where}: constraint '{c}': {e}") from None
    kiln_fields = d.get("kiln") if isinstance(d.get("kiln"), dict) else {}

    problem = Problem(problem_dir, name, op_type if isinstance(op_type, str) else None, axes, inputs,
                      outputs, reference, entrypoint, constraints, [],
                      "%016x" % fnv1a64(wl_bytes, fnv1a64(def_bytes)), kiln_fields)
    problem.workloads = _parse_workloads(wl_bytes, problem, wl_path)
    return problem


# ---------------------------------------------------------------------------------------------------
# The content hash: a problem's identity (docs/capture.md, "A problem is its content"). Results and
# kernels belong to a content, never to a name: capture gives a changed problem a new name, and the C side
# recomputes this hash from the same files, so the recipe below is the contract between the two.

CONTENT_HASH_TAG = "kiln-content-hash 1"
_HASH_CHUNK = 16 << 20


def canonical_lines(value: Any, prefix: str = ""):
    """The canonical text of a JSON value, one line per leaf: `PATH VALUE`, PATH the keys joined by "."
    (objects in sorted key order) and "[i]" for list items; VALUE `null`, `true`, `false`,
    `n` + printf("%.17g") of the number as a double, or `s<UTF-8 byte length>:` + the string's bytes;
    an empty object `{}`, an empty list `[]`. Every line ends with a newline."""
    if isinstance(value, dict):
        if not value:
            yield f"{prefix} {{}}\n"
        for key in sorted(value, key=lambda k: k.encode()):
            yield from canonical_lines(value[key], f"{prefix}.{key}" if prefix else key)
    elif isinstance(value, list):
        if not value:
            yield f"{prefix} []\n"
        for i, item in enumerate(value):
            yield from canonical_lines(item, f"{prefix}[{i}]")
    elif value is None:
        yield f"{prefix} null\n"
    elif isinstance(value, bool):
        yield f"{prefix} {'true' if value else 'false'}\n"
    elif isinstance(value, (int, float)):
        yield f"{prefix} n{'%.17g' % float(value)}\n"
    elif isinstance(value, str):
        yield f"{prefix} s{len(value.encode())}:{value}\n"
    else:
        raise ProblemError(f"not a JSON value: {type(value).__name__}")


def tensor_digest(path: str, key: str) -> dict:
    """{"dtype", "shape", "blake2b"} of one tensor of a safetensors file: its dtype code and shape as the
    header says, and BLAKE2b (16 bytes, hex) of its data bytes. Raises ProblemError."""
    import hashlib
    import struct
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) != 8:
                raise ProblemError(f"{path}: not a safetensors file")
            (n,) = struct.unpack("<Q", head)
            if n > 100 << 20:
                raise ProblemError(f"{path}: safetensors header of {n} bytes")
            header = json.loads(f.read(n))
            entry = header.get(key) if isinstance(header, dict) else None
            if not isinstance(entry, dict):
                raise ProblemError(f"{path}: no tensor '{key}'")
            begin, end = entry["data_offsets"]
            h = hashlib.blake2b(digest_size=16)
            f.seek(8 + n + begin)
            left = end - begin
            while left > 0:
                chunk = f.read(min(left, _HASH_CHUNK))
                if not chunk:
                    raise ProblemError(f"{path}: tensor '{key}' is cut short")
                h.update(chunk)
                left -= len(chunk)
    except OSError as e:
        raise ProblemError(f"{path}: cannot read: {e.strerror}") from None
    except (ValueError, KeyError, TypeError):
        raise ProblemError(f"{path}: malformed safetensors header") from None
    return {"dtype": entry["dtype"], "shape": entry["shape"], "blake2b": h.hexdigest()}


def _identity_of_workload(obj: dict, problem_dir: str) -> dict:
    def digest(rel: str, key: str) -> dict:
        return tensor_digest(rel if os.path.isabs(rel) else os.path.join(problem_dir, rel), key)

    out = {k: v for k, v in obj.items() if k not in ("uuid", "kiln")}
    inputs = {}
    for name, desc in (obj.get("inputs") or {}).items():
        if isinstance(desc, dict) and desc.get("type") == "safetensors":
            desc = dict({"type": "safetensors"}, **digest(desc["path"], desc["tensor_key"]))
        inputs[name] = desc
    out["inputs"] = inputs
    drawn = (obj.get("kiln") or {}).get("drawn")
    if drawn:
        ident = {}
        for name, entry in drawn.items():
            entry = dict(entry)
            if entry.get("slice"):
                sl = entry["slice"]
                entry["slice"] = dict({"elements": sl["elements"]}, **digest(sl["path"], sl["tensor_key"]))
            ident[name] = entry
        out["kiln"] = {"drawn": ident}
    return out


def content_hash(definition: dict, workloads: list, problem_dir: str) -> str:
    """A problem's content hash (32 hex digits): BLAKE2b, 16-byte digest, of the canonical lines
    (canonical_lines) of {"definition": D, "workloads": [W...]} after the line CONTENT_HASH_TAG.

    D is definition.json without "name", "description" and "kiln", but with "kiln": {"torch_flags"}
    when the definition has them (they change what the reference computes). The workloads are the lines
    of workload.jsonl (a trace record's "workload"), except those whose "kiln" says {"set": "random"}
    (random sets derived from the rest), each without "uuid" and "kiln", every safetensors input
    replaced by {"type": "safetensors"} + tensor_digest of the tensor it names, and, when the line has
    kiln.drawn, "kiln": {"drawn": ...} with every slice replaced by {"elements"} + tensor_digest."""
    import hashlib
    d = {k: v for k, v in definition.items() if k not in ("name", "description", "kiln")}
    flags = (definition.get("kiln") or {}).get("torch_flags")
    if flags is not None:
        d["kiln"] = {"torch_flags": flags}
    ws = []
    for w in workloads:
        if isinstance(w.get("workload"), dict):
            w = w["workload"]
        if (w.get("kiln") or {}).get("set") == "random":
            continue
        ws.append(_identity_of_workload(w, problem_dir))
    h = hashlib.blake2b(digest_size=16)
    h.update((CONTENT_HASH_TAG + "\n").encode())
    for line in canonical_lines({"definition": d, "workloads": ws}):
        h.update(line.encode())
    return h.hexdigest()


def content_hash_of_dir(problem_dir: str) -> str:
    """content_hash of the problem files in problem_dir. Raises ProblemError."""
    _, definition = _load_json_file(os.path.join(problem_dir, DEFINITION_FILE))
    path = os.path.join(problem_dir, WORKLOAD_FILE)
    try:
        with open(path) as f:
            workloads = [json.loads(line) for line in f if line.strip()]
    except OSError as e:
        raise ProblemError(f"{path}: cannot read: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise ProblemError(f"{path}: bad JSON: {e}") from None
    if not isinstance(definition, dict) or not all(isinstance(w, dict) for w in workloads):
        raise ProblemError(f"{problem_dir}: definition or workloads are not JSON objects")
    return content_hash(definition, workloads, problem_dir)
