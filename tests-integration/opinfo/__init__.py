"""OpInfo conformance harness: every OpInfo of PyTorch's op_db compiled with backend="coil".

`harness` runs one (op, dtype) pair and says which samples pass and whether the compiled graphs
ran fully native; `sweep` runs all of op_db (nox -s opinfo); `test_opinfo_sample` is the fixed
sample CI runs. Expected failures live in expected_failures.json.
"""
