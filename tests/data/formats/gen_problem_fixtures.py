"""Writes tests/data/formats/problems/: problem directories for test_problem.c and test_refdata.c (good_*)
and malformed ones (def_*: the fault is in definition.json; wl_*: on line 3 of workload.jsonl, after a good
line and a blank one). Run it from anywhere; it replaces the whole folder. Only the standard library."""
import json, os, copy, shutil
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "problems")
shutil.rmtree(root, ignore_errors=True)
os.makedirs(root)

base = {
  "name": "fixture_norm",
  "op_type": "rmsnorm",
  "description": "A small problem for the parser tests: every axis kind, a scalar and a 0-d input.",
  "tags": ["status:test"],
  "axes": {
    "M": {"type": "var", "description": "rows"},
    "E": {"type": "expr", "expression": "D * 2 + M % 3", "description": "uses another expr axis"},
    "N": {"type": "const", "value": 16},
    "H": {"type": "const", "value": 4, "description": None},
    "D": {"type": "expr", "expression": "N // H"}
  },
  "custom_inputs_entrypoint": None,
  "inputs": {
    "x": {"shape": ["M", "N"], "dtype": "float32", "description": None},
    "weight": {"shape": ["N"], "dtype": "bfloat16"},
    "eps": {"shape": None, "dtype": "float32"},
    "count": {"shape": [], "dtype": "int64"}
  },
  "outputs": {
    "y": {"shape": ["M", "N"], "dtype": "float32"},
    "z": {"shape": ["M", "E"], "dtype": "float16"}
  },
  "reference": "import torch\n\ndef run(x, weight, eps, count):\n    y = x * weight.float()\n    return y, y[:, :1].half()\n",
  "constraints": ["N % H == 0"],
  "kiln": {"flops": 1000, "tolerance": {"atol": 0.001, "rtol": 0.01, "rel_l2": 0.005}, "call_count": 3}
}

def inputs(**over):
    d = {"x": {"type": "random"}, "weight": {"type": "random"},
         "eps": {"type": "scalar", "value": 1e-5}, "count": {"type": "scalar", "value": 3}}
    for k, v in over.items():
        if v is None: d.pop(k)
        else: d[k] = v
    return d

w1 = {"uuid": "w1", "axes": {"M": 5}, "inputs": inputs()}
good_lines = [
  json.dumps(w1),
  "",
  json.dumps({"definition": "fixture_norm",
              "workload": {"uuid": "w2", "axes": {"M": 7, "D": 4},
                           "inputs": inputs(x={"type": "safetensors", "path": "t/x.safetensors", "tensor_key": "x"},
                                            eps={"type": "scalar", "value": True}, count={"type": "random"}),
                           "correctness": {"max_atol": 0.5}},
              "solution": None, "evaluation": None}),
  json.dumps({"uuid": "w3", "axes": {"M": 0, "N": 16}, "inputs": inputs(),
              "tolerance": {"atol": 0, "rtol": 0, "rel_l2": 0}, "extra": [1, 2]}) + "\r",
  "   ",
]

def write(name, definition, lines):
    d = os.path.join(root, name); os.makedirs(d)
    with open(os.path.join(d, "definition.json"), "w") as f:
        if isinstance(definition, str): f.write(definition)
        else: json.dump(definition, f, indent=2)
    with open(os.path.join(d, "workload.jsonl"), "w", newline="") as f:
        f.write("\n".join(lines) + "\n")

write("good_basic", base, good_lines)

# A custom-input problem.
cust = copy.deepcopy(base)
cust["custom_inputs_entrypoint"] = "make_inputs"
cust["reference"] += "\ndef make_inputs(axes_and_scalars, device):\n    return {}\n"
custom_all = {k: {"type": "custom"} for k in base["inputs"]}
write("good_custom", cust, [json.dumps({"uuid": "c1", "axes": {"M": 2}, "inputs": custom_all})])

# ---- malformed definitions (workload.jsonl stays good) ----
wl_ok = [json.dumps(w1)]
def bad_def(name, mutate, lines=wl_ok):
    d = copy.deepcopy(base); mutate(d); write(name, d, lines)

write("def_bad_json", '{\n  "name": "x",\n  "axes": {\n    "M": {"type": "var"},\n  }\n}\n', wl_ok)
write("def_not_object", "[1, 2, 3]\n", wl_ok)
bad_def("def_missing_name", lambda d: d.pop("name"))
bad_def("def_missing_axes", lambda d: d.pop("axes"))
bad_def("def_missing_reference", lambda d: d.pop("reference"))
bad_def("def_axis_bad_type", lambda d: d["axes"]["M"].update(type="variable"))
bad_def("def_const_negative", lambda d: d["axes"]["N"].update(value=-16))
bad_def("def_const_fraction", lambda d: d["axes"]["N"].update(value=16.5))
bad_def("def_const_no_value", lambda d: d["axes"]["N"].pop("value"))
bad_def("def_expr_no_expression", lambda d: d["axes"]["D"].pop("expression"))
bad_def("def_unknown_dtype", lambda d: d["inputs"]["weight"].update(dtype="float23"))
bad_def("def_shape_unknown_axis", lambda d: d["inputs"]["x"].update(shape=["M", "K"]))
lit = copy.deepcopy(base); lit["inputs"]["x"]["shape"] = ["M", "16"]; lit["outputs"]["y"]["shape"] = ["2", "M", "N"]
write("good_literal_dims", lit, [json.dumps(w1)])
bad_def("def_shape_literal_huge", lambda d: d["inputs"]["x"].update(shape=["M", "99999999999999999999"]))
bad_def("def_shape_not_array", lambda d: d["inputs"]["x"].update(shape="M"))
bad_def("def_shape_missing", lambda d: d["inputs"]["x"].pop("shape"))
bad_def("def_too_many_dims", lambda d: d["outputs"]["y"].update(shape=["M"] * 9))
bad_def("def_io_overlap", lambda d: d["outputs"].update(x={"shape": ["M"], "dtype": "float32"}))
bad_def("def_input_is_axis", lambda d: d["inputs"].update(N={"shape": None, "dtype": "int64"}))
bad_def("def_bad_input_name", lambda d: d["inputs"].update({"x-1": {"shape": ["M"], "dtype": "float32"}}))
bad_def("def_no_outputs", lambda d: d.update(outputs={}))
bad_def("def_kiln_bad_tolerance", lambda d: d["kiln"]["tolerance"].pop("rel_l2"))
bad_def("def_kiln_min_bytes_negative", lambda d: d["kiln"].update(min_bytes=-5))
bad_def("def_kiln_not_object", lambda d: d.update(kiln=[1]))
bad_def("def_constraints_not_strings", lambda d: d.update(constraints=["N > 0", 7]))
bad_def("def_expr_cycle", lambda d: (d["axes"]["D"].update(expression="E - 1"),))
bad_def("def_expr_div_zero", lambda d: d["axes"]["D"].update(expression="N // (H - 4)"))
bad_def("def_expr_unknown_name", lambda d: d["axes"]["D"].update(expression="N // Q"))
bad_def("def_expr_syntax", lambda d: d["axes"]["D"].update(expression="N // * H"))
# duplicate keys cannot be made with json.dump
dup_axis = json.dumps(base, indent=2).replace('"N": {\n      "type": "const",\n      "value": 16\n    },',
    '"N": {\n      "type": "const",\n      "value": 16\n    },\n    "N": {"type": "var"},', 1)
assert dup_axis.count('"N": {') == 2
write("def_duplicate_axis", dup_axis, wl_ok)
dup_top = json.dumps(base, indent=2)[:-2] + ',\n  "name": "other"\n}\n'
write("def_duplicate_name", dup_top, wl_ok)

# ---- malformed workloads: line 1 good, line 2 blank, the fault on line 3 ----
def bad_wl(name, line3, definition=base):
    write(name, definition, [json.dumps(w1), "", line3 if isinstance(line3, str) else json.dumps(line3)])

bad_wl("wl_bad_json", '{"uuid": "w9", "axes": {"M": 3}, "inputs": ')
bad_wl("wl_not_object", "[]")
bad_wl("wl_type_randn", {"uuid": "w9", "axes": {"M": 3}, "inputs": inputs(weight={"type": "randn"})})
bad_wl("wl_missing_uuid", {"axes": {"M": 3}, "inputs": inputs()})
bad_wl("wl_missing_axes", {"uuid": "w9", "inputs": inputs()})
bad_wl("wl_unbound_var", {"uuid": "w9", "axes": {}, "inputs": inputs()})
bad_wl("wl_unknown_axis", {"uuid": "w9", "axes": {"M": 3, "K": 2}, "inputs": inputs()})
bad_wl("wl_const_mismatch", {"uuid": "w9", "axes": {"M": 3, "N": 32}, "inputs": inputs()})
bad_wl("wl_expr_mismatch", {"uuid": "w9", "axes": {"M": 3, "D": 5}, "inputs": inputs()})
bad_wl("wl_negative_axis", {"uuid": "w9", "axes": {"M": -3}, "inputs": inputs()})
bad_wl("wl_fraction_axis", {"uuid": "w9", "axes": {"M": 2.5}, "inputs": inputs()})
bad_wl("wl_missing_input", {"uuid": "w9", "axes": {"M": 3}, "inputs": inputs(weight=None)})
bad_wl("wl_unknown_input", {"uuid": "w9", "axes": {"M": 3}, "inputs": inputs(bias={"type": "random"})})
bad_wl("wl_scalar_no_value", {"uuid": "w9", "axes": {"M": 3}, "inputs": inputs(eps={"type": "scalar"})})
bad_wl("wl_scalar_string", {"uuid": "w9", "axes": {"M": 3}, "inputs": inputs(eps={"type": "scalar", "value": "1e-5"})})
bad_wl("wl_scalar_for_tensor", {"uuid": "w9", "axes": {"M": 3}, "inputs": inputs(x={"type": "scalar", "value": 1})})
bad_wl("wl_safetensors_no_key", {"uuid": "w9", "axes": {"M": 3}, "inputs": inputs(x={"type": "safetensors", "path": "a.safetensors"})})
bad_wl("wl_safetensors_no_path", {"uuid": "w9", "axes": {"M": 3}, "inputs": inputs(x={"type": "safetensors", "tensor_key": "x"})})
bad_wl("wl_custom_no_entrypoint", {"uuid": "w9", "axes": {"M": 3}, "inputs": custom_all})
bad_wl("wl_custom_mixed", {"uuid": "w9", "axes": {"M": 3}, "inputs": dict(custom_all, x={"type": "random"})}, definition=cust)
bad_wl("wl_duplicate_uuid", {"uuid": "w1", "axes": {"M": 3}, "inputs": inputs()})
bad_wl("wl_bad_tolerance", {"uuid": "w9", "axes": {"M": 3}, "inputs": inputs(), "tolerance": {"atol": 0.1, "rtol": -1, "rel_l2": 0.1}})
bad_wl("wl_wrong_definition", {"definition": "other_problem", "workload": {"uuid": "w9", "axes": {"M": 3}, "inputs": inputs()}})
sq = copy.deepcopy(base); sq["outputs"]["y"]["shape"] = ["M", "M", "N"]
bad_wl("wl_size_overflow", {"uuid": "w9", "axes": {"M": 2**40}, "inputs": inputs()}, definition=sq)
bad_wl("wl_duplicate_key", '{"uuid": "w9", "axes": {"M": 3, "M": 4}, "inputs": ' + json.dumps(inputs()) + '}')
write("wl_empty", base, ["", "  ", ""])
print(len(os.listdir(root)), "problem fixtures")
