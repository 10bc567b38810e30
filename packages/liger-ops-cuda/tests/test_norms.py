"""CUDA-specific paths of the norm family (interface 1.1) that the shared suite may not
reach, each checked against the float64 oracle through the conformance helpers: chunked
wide rows, multi-row tiles, parameter-gradient partials from several programs, DyT column
blocks, and GroupNorm's fused and split plans."""

import pytest
import torch

from liger_core.conformance.dyt_check import check_dyt
from liger_core.conformance.dyt_check import make_inputs as dyt_inputs
from liger_core.conformance.fused_add_rms_norm_check import check_fused_add_rms_norm
from liger_core.conformance.fused_add_rms_norm_check import make_inputs as fa_inputs
from liger_core.conformance.group_norm_check import check_group_norm
from liger_core.conformance.group_norm_check import make_inputs as gn_inputs
from liger_core.conformance.layer_norm_check import check_layer_norm
from liger_core.conformance.layer_norm_check import make_inputs as ln_inputs
from liger_core.conformance.poly_norm_check import check_poly_norm
from liger_core.conformance.poly_norm_check import make_inputs as pn_inputs
from liger_core.interface import parse_version
from liger_ops_cuda import BACKEND, hardware
from liger_ops_cuda.group_norm import plan_groups
from liger_ops_cuda.rms_norm import plan_tiles

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
NORM_FAMILY = ("fused_add_rms_norm", "layer_norm", "group_norm", "poly_norm", "dyt")


def test_backend_declares_interface_1_1():
    assert parse_version(BACKEND.interface_version) >= (1, 1)
    assert all(op in BACKEND.ops for op in NORM_FAMILY)


@pytest.fixture
def chunked(monkeypatch):
    """Rows of more than 64 columns take the chunked plan, in 64-wide chunks."""
    monkeypatch.setattr(hardware, "MAX_FUSED_BLOCK", 64)
    monkeypatch.setattr(hardware, "CHUNK_BLOCK", 64)
    assert plan_tiles(150).chunked and plan_tiles(150, backward=True).chunked


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_chunked_rows(chunked, dtype):
    # 150 columns: two full chunks and a ragged one; 7 rows over several backward programs.
    x, r, w, dy, ds = fa_inputs((7, 150), dtype, DEVICE, residual_dtype=torch.float32)
    check_fused_add_rms_norm(BACKEND, x, r, w, dy, ds, casting_mode="gemma", offset=0.5)
    x, w, b, dy = ln_inputs((7, 150), dtype, DEVICE)
    check_layer_norm(BACKEND, x + 50.0, w, b, dy)  # shifted sums keep a large mean exact
    x, w, b, dy = pn_inputs((7, 150), dtype, DEVICE)
    check_poly_norm(BACKEND, x, w, b, dy)


def test_chunked_fused_add_in_place_only_y(chunked):
    x, r, w, dy, _ = fa_inputs((5, 100), torch.float16, DEVICE)
    check_fused_add_rms_norm(BACKEND, x, r, w, dy, None, in_place=True)


def test_multi_row_tiles_and_several_programs():
    # Short rows pack several per tile (forward and backward) and the backward grid has
    # several programs (the interpreter stands in 4 SMs), each with its own partial row.
    assert plan_tiles(24).block_m > 1 and plan_tiles(24, backward=True).block_m > 1
    assert hardware.sm_count() > 1 or torch.cuda.is_available()
    x, r, w, dy, ds = fa_inputs((45, 24), torch.float32, DEVICE)
    check_fused_add_rms_norm(BACKEND, x, r, w, dy, ds)
    x, w, b, dy = ln_inputs((45, 24), torch.bfloat16, DEVICE, param_dtype=torch.float32)
    check_layer_norm(BACKEND, x, w, b, dy)
    x, w, b, dy = pn_inputs((45, 24), torch.float32, DEVICE)
    check_poly_norm(BACKEND, x, w, b, dy)


def test_partials_from_one_program(monkeypatch):
    monkeypatch.setattr(hardware, "sm_count", lambda device_index=None: 1)
    x, w, b, dy = ln_inputs((9, 40), torch.float32, DEVICE)
    check_layer_norm(BACKEND, x, w, b, dy)
    x, a, g, b, dy = dyt_inputs((9, 40), torch.float32, DEVICE)
    check_dyt(BACKEND, x, a, g, b, dy)


def test_dyt_column_blocks(monkeypatch):
    # Rows wider than one column block: a 2-D grid of row groups x column blocks, with
    # grad_alpha summed over every program.
    monkeypatch.setattr(hardware, "DYT_MAX_BLOCK_N", 32)
    x, a, g, b, dy = dyt_inputs((11, 100), torch.bfloat16, DEVICE, param_dtype=torch.float32)
    check_dyt(BACKEND, x, a, g, b, dy)


def test_parameters_without_grad_skip_partials():
    x, w, b, dy = ln_inputs((6, 32), torch.float32, DEVICE)
    xi = x.clone().requires_grad_()
    BACKEND.ops["layer_norm"](xi, w, b, 1e-5).backward(dy)  # w, b need no grad
    xr = x.clone().requires_grad_()
    torch.nn.functional.layer_norm(xr, (32,), w, b, 1e-5).backward(dy)
    torch.testing.assert_close(xi.grad, xr.grad, rtol=1e-4, atol=1e-5)


def test_in_place_fused_add_with_gradient_broadcast_over_rows():
    x, r, w, _, _ = fa_inputs((6, 40), torch.float32, DEVICE)
    dy = torch.randn(40, generator=torch.Generator().manual_seed(3)).to(DEVICE).expand(6, 40)
    xk = x.clone().requires_grad_()
    y, _ = BACKEND.ops["fused_add_rms_norm"](xk, r, w, 1e-6, 0.0, "llama", True)
    y.backward(dy)
    xr = x.clone().requires_grad_()
    y_ref = torch.nn.functional.rms_norm(xr + r, (40,), w, 1e-6)
    y_ref.backward(dy)
    torch.testing.assert_close(xk.grad, xr.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "shape,groups",
    [((2, 6, 50), 3), ((3, 4, 7, 9), 2), ((1, 16, 20), 4)],
    ids=["2-spans", "ragged-tiles", "channel-blocks"],
)
@pytest.mark.parametrize("split", [True, False], ids=["split", "fused"])
def test_group_norm_plans(monkeypatch, shape, groups, split):
    # Small tiles and chunks so a group spans several tiles, channel blocks and chunks.
    monkeypatch.setattr(hardware, "GROUP_NORM_TILE_ELEMENTS", 32)
    monkeypatch.setattr(hardware, "GROUP_NORM_CHUNK_ELEMENTS", 64)
    monkeypatch.setattr(hardware, "GROUP_NORM_SPLIT_PROGRAMS_PER_SM", 1000 if split else 0)
    batch, channels = shape[:2]
    hw = 1
    for s in shape[2:]:
        hw *= s
    plan = plan_groups(batch * groups, channels // groups, hw, torch.device(DEVICE))
    assert plan.split == split
    if split:
        assert plan.n_chunks > 1
    x, w, b, dy = gn_inputs(shape, torch.float32, DEVICE)
    check_group_norm(BACKEND, x + 20.0, w, b, dy, groups)


@pytest.mark.parametrize("split", [True, False], ids=["split", "fused"])
def test_group_norm_outlying_first_tile(monkeypatch, split):
    # Statistics are shifted by the mean of a chunk's first tile: a first channel far from
    # the others must not cost precision.
    monkeypatch.setattr(hardware, "GROUP_NORM_TILE_ELEMENTS", 32)
    monkeypatch.setattr(hardware, "GROUP_NORM_CHUNK_ELEMENTS", 64)
    monkeypatch.setattr(hardware, "GROUP_NORM_SPLIT_PROGRAMS_PER_SM", 1000 if split else 0)
    x, w, b, dy = gn_inputs((2, 8, 40), torch.float32, DEVICE)
    x[:, ::4] += 30.0
    check_group_norm(BACKEND, x, w, b, dy, 2)


def test_layer_norm_chunked_outlying_first_chunk(chunked):
    x, w, b, dy = ln_inputs((3, 150), torch.float32, DEVICE)
    x[:, :64] += 40.0
    check_layer_norm(BACKEND, x, w, b, dy)


def test_group_norm_split_bf16_without_affine(monkeypatch):
    monkeypatch.setattr(hardware, "GROUP_NORM_CHUNK_ELEMENTS", 64)
    monkeypatch.setattr(hardware, "GROUP_NORM_SPLIT_PROGRAMS_PER_SM", 1000)
    x, w, b, dy = gn_inputs((2, 4, 300), torch.bfloat16, DEVICE, has_weight=False, has_bias=False)
    check_group_norm(BACKEND, x, w, b, dy, 2)
