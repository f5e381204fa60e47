"""The int8 output projection read from rows: MatMulInteger of a Transpose of R_q = Q^T, folded at load.

The quantizer (export/variants/int8.py) writes the output projection MatMul(h, P) as

    DynamicQuantizeLinear(h) -> (hq, hs, hz)
    MatMulInteger(hq, Q, hz, z) -> int32, Cast to float, Mul by hs * s

with Q (d_model, vocabulary) int8 and s, z its scales and (zero) zero points. Where the tied
embeddings gather rows of R_q = Q^T (vocabulary, d_model) (export/variants/int8_embedding.py),
`rows_projection` makes the MatMulInteger read Transpose(R_q, perm=[1, 0]) instead of Q, so that
the bundle stores the matrix once, as rows. ONNX Runtime folds the Transpose of a constant when it
loads the graph (constant folding, before its fusions), so the session holds Q as an initializer of
its own, fuses DynamicQuantizeLinear + MatMulInteger + Cast + Mul into DynamicQuantizeMatMul,
prepacks Q and frees it: the same kernel on the same packed matrix as a MatMulInteger by Q, and the
same outputs, bit for bit. (A com.microsoft.QGemm of R_q with transB computes the same products as
fast, but its CPU kernel's prepacking keeps a transposed copy: +29 MiB anonymous per session on the
opus-mt shape, ONNX Runtime 1.31.1; docs/export.md.)
"""

from __future__ import annotations

import onnx
from onnx import helper


def rows_projection(proto: onnx.ModelProto, quantized: str, rows: str) -> bool:
    """Make proto's MatMulInteger by the int8 matrix `quantized` (d_model, vocabulary) read
    Transpose(`rows`), rows being its transpose, an initializer already in the graph (module
    docstring); whether there was one."""
    graph = proto.graph
    matmuls = [n for n in graph.node if n.op_type == "MatMulInteger" and n.input[1] == quantized]
    for matmul in matmuls:
        base = matmul.name or matmul.output[0]
        transposed = f"{base}/rows_transposed"
        graph.node.insert(list(graph.node).index(matmul),
                          helper.make_node("Transpose", [rows], [transposed], f"{base}/rows_transpose",
                                           perm=[1, 0]))
        matmul.input[1] = transposed
    return bool(matmuls)
