"""Compiling the Triton tree kernels to PTX without a GPU (tests/test_triton_eisner.py, test_triton_sibling.py):
what the interpreter cannot check -- types, layouts, the loops' carried values."""
import os
import subprocess
import sys

SCRIPT = """
import importlib
import sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
module = importlib.import_module("ssvm_torch.trees." + sys.argv[1])
maxplus = sys.argv[2] == "max-plus"
kept = sys.argv[3].split(",")
for fn in (module._inside_kernel, module._outside_kernel):
    for dtype in ("*fp32", "*fp64"):
        sig = {name: ("i32" if name in ("N", "START") else "constexpr" if name in ("MAXPLUS", "BLOCK_I", "BLOCK_D")
                      else "*i32" if name in kept and maxplus else dtype) for name in fn.arg_names}
        src = ASTSource(fn=fn, signature=sig, constexprs={"MAXPLUS": maxplus, "BLOCK_I": 64, "BLOCK_D": 32})
        kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "num_stages": 1})
        assert ".entry" in kernel.asm["ptx"]
        print("compiled", fn.__name__, dtype)
"""


def assert_kernels_compile(module: str, kept: tuple, maxplus: str) -> None:
    """ssvm_torch.trees.<module>'s inside and outside kernels compile for sm_90 in float32 and float64, in the
    max-plus semiring (``kept``: the pointer arguments that hold int32 backpointers there) or the log one; in
    a process without TRITON_INTERPRET, which makes the kernels interpreted functions at import."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", SCRIPT, module, maxplus, ",".join(kept)], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.count("compiled") == 4
