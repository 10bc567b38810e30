"""`liger_core.ops.fused_moe.route`, the routing every backend's grouped GEMMs run over: no host
synchronisation (it runs on meta tensors, which have no values to read: every shape comes from
the inputs' shapes) and the bad expert-id check deferred to `PendingBadCount.check`. Its sorted
rows and tiles are checked by each vendor's tests/test_fused_moe.py."""

from __future__ import annotations

import pytest
import torch

from liger_core.ops import _losses
from liger_core.ops import fused_moe as M


class _Unread:
    """Stands in for `HostCopy` on meta tensors (nothing to copy); a read would fail the test."""

    def __init__(self, values: torch.Tensor) -> None:
        self.shape = values.shape

    def tolist(self):
        raise AssertionError("route read a value on the host")


@pytest.mark.parametrize("tokens, experts, top_k, block_m", [(4096, 128, 8, 64), (13, 5, 2, 16), (0, 3, 1, 64)])
def test_route_reads_no_value_on_the_host(monkeypatch, tokens, experts, top_k, block_m):
    monkeypatch.setattr(_losses, "HostCopy", _Unread)
    index = torch.empty(tokens, top_k, dtype=torch.int64, device="meta")
    r, expert_ids = M.route(index, experts, block_m)
    slots = tokens * top_k
    bound = min(slots, -(-slots // block_m) + experts)
    assert r.max_tiles == M.max_tiles(slots, experts, block_m) == bound
    shapes = {name: tuple(t.shape) for name, t in vars(r).items()}
    assert shapes == {
        "token_of_row": (slots,),
        "slot_of_row": (slots,),
        "row_of_slot": (slots,),
        "expert_offsets": (experts + 1,),
        "tile_expert": (bound,),
        "tile_row_start": (bound,),
        "n_tiles": (1,),
        "expert_of_row": (slots,),
    }
    assert expert_ids._n_bad.shape == ()


def test_max_tiles_bounds_every_routing():
    # Every expert adds at most one partial tile: the worst case puts one row in each of all but
    # one expert, the rest in the last.
    g = torch.Generator().manual_seed(0)
    for experts, block_m in ((5, 4), (3, 2), (8, 16)):
        for tokens in (1, 7, 40):
            index = torch.randint(0, experts, (tokens, 2), generator=g)
            r, _ = M.route(index, experts, block_m)
            assert int(r.n_tiles) <= r.max_tiles
        worst = torch.tensor([*range(experts - 1), *[experts - 1] * (3 * block_m + 1)])[:, None]
        r, _ = M.route(worst, experts, block_m)
        assert int(r.n_tiles) == experts - 1 + 4 <= r.max_tiles


def test_bad_ids_raise_at_check_not_at_route():
    index = torch.tensor([[0, 5], [6, 1]])
    r, expert_ids = M.route(index, 5, block_m=2)
    # Clamped to expert 0 for the kernels: expert 0 gets the two bad ids' rows.
    assert r.expert_offsets.tolist() == [0, 3, 4, 4, 4, 4]
    assert r.expert_of_row.tolist() == [0, 0, 0, 1]
    with pytest.raises(ValueError, match=r"top_k_index must be in \[0, 5\).*; 2 are not \(first: 5\)"):
        expert_ids.check()
