"""bench/engines/int8_products.py: every form computes the chain; the service's int8 products are exact."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import numpy_helper

from bench.engines.int8_products import chain, forms, main, measure, nbits_form, session, table
from export.variants.int8 import quantize_graph
from interface.sessions import EXACT_INT8_PRODUCTS, cpu_flags, cpu_session_config


def test_the_chain_is_the_product_of_its_weights():
    model = chain(2, 16, 32)
    weights = [numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer]
    assert [w.shape for w in weights] == [(16, 32), (32, 16)] * 2
    x = np.random.default_rng(0).standard_normal((3, 16))
    (y,) = session(model, {}, 1).run(None, {"x": x.astype(np.float32)})
    expected = x @ weights[0] @ weights[1] @ weights[2] @ weights[3]
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def small():
    """The benchmark at a small size (2 pairs, d_model 128, d_ff 256), briefly; MatMulNBits in two sizes."""
    return measure(2, 128, 256, [1, 8], threads=1, budget_s=0.02, blocks=(32, 128))


def test_every_form_is_timed_against_fp32_and_close_to_it(small):
    assert forms(small["blocks"])[3:] == [nbits_form(32), nbits_form(128)]
    for form in forms(small["blocks"]):
        for m in (1, 8):
            assert small["ms"][f"{form} {m}"] > 0
            assert small["vs_fp32"][f"{form} {m}"] == pytest.approx(
                small["ms"][f"fp32 {m}"] / small["ms"][f"{form} {m}"], rel=1e-2)
            # 8-bit weights and activations: a few percent at most; fp32 against itself exactly
            assert small["rel_error"][f"{form} {m}"] < (1e-7 if form == "fp32" else 0.05)
    for block in (32, 128):
        assert f"| MatMulNBits 8-bit, blocks of {block} |" in table(small)


def test_the_service_int8_products_equal_the_exact_u8u8_ones():
    """The int8 chain through the service's CPU session config and through ONNX Runtime's exact U8U8
    products: the same integer sums, so the same outputs (a saturating U8S8 kernel would differ)."""
    int8 = quantize_graph(chain(2, 128, 256))
    x = np.random.default_rng(2).standard_normal((8, 128), dtype=np.float32) * 4
    (service,) = session(int8, cpu_session_config(cpu_flags()), 1).run(None, {"x": x})
    (exact,) = session(int8, EXACT_INT8_PRODUCTS, 1).run(None, {"x": x})
    np.testing.assert_allclose(service, exact, rtol=1e-5, atol=1e-5 * np.abs(exact).max())


@pytest.mark.parametrize("argv, named", [(["--layers", "0"], "--layers"), (["--d-model", "-1"], "--d-model"),
                                         (["--d-ff", "0"], "--d-ff"), (["--threads", "0"], "--threads"),
                                         (["--rows", "1", "0"], "--rows"), (["--seconds", "0"], "--seconds")])
def test_bad_sizes_are_refused_naming_the_flag(argv, named, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert f"{named} must be" in capsys.readouterr().err


def test_a_block_size_the_quantizer_does_not_take_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--nbits-blocks", "128", "1024"])
    assert exit_.value.code == 2
    assert "--nbits-blocks" in capsys.readouterr().err
