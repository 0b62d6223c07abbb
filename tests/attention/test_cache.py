"""The key/value cache's reorder (beam search): the filled positions of the chosen rows, in order."""

import pytest
import torch

from zoo.attention.cache import LayerKVCache


@pytest.mark.parametrize("index", [[2, 2, 0, 1], [3, 0], [1, 0, 3, 2, 2, 1]])
def test_reorder_keeps_the_chosen_rows_of_what_is_cached(index):
    cache = LayerKVCache(max_seq_len=16)
    k, v = torch.randn(4, 2, 5, 3), torch.randn(4, 2, 5, 3)
    cache.update(k[:, :, :3], v[:, :, :3])
    cache.update_aux("ids", torch.arange(4 * 2 * 3).view(4, 2, 3))
    cache.update(k[:, :, 3:], v[:, :, 3:])  # 5 positions cached in all
    aux = torch.randn(4, 2, 2)
    ids = cache.update_aux("ids", aux.long()).clone()  # a view of the buffer, reordered in place
    rows = torch.tensor(index)
    cache.reorder(rows)
    got_k, got_v = cache.update(torch.zeros(len(index), 2, 1, 3), torch.ones(len(index), 2, 1, 3))
    assert torch.equal(got_k[:, :, :5], k[rows]) and torch.equal(got_v[:, :, :5], v[rows])
    assert (got_k[:, :, 5] == 0).all() and (got_v[:, :, 5] == 1).all()
    assert torch.equal(cache._aux["ids"][:, :, :5], ids[rows])
