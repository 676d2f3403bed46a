"""`NNDF.slots`: the one pool of static slots (reuse per key, numbering, close releases all) and the KV slot's
reset and in-place beam reordering."""
import pytest
import torch

from NNDF import slots
from NNDF.slots import KVSlot, Slot, SlotPool, reordered, stacked_view, stacked_zeros, step_inputs


def _kv(rows: int, length: int, number: int = -1, stacked: bool = False) -> KVSlot:
    inputs = step_inputs(rows, length, "cpu")
    inputs["cache_position"] = torch.zeros(1, dtype=torch.long)
    past = (stacked_zeros(3, (rows, 2, length, 4), torch.float32, "cpu") if stacked
            else [torch.zeros(rows, 2, length, 4) for _ in range(3)])
    return KVSlot(rows, length, past, inputs, graph_id=number)


def test_pool_makes_one_slot_per_key_and_reuses_it():
    pool, made = SlotPool(), []

    def make(number):
        made.append(number)
        return _kv(2, 8, number)

    first = pool.get((2, 8), make)
    assert pool.get((2, 8), make) is first  # reused, not made again
    other = pool.get((4, 8), lambda number: _kv(4, 8, number))
    assert other is not first and (4, 8) in pool and (2, 16) not in pool
    assert made == [1] and (first.graph_id, other.graph_id) == (1, 2)  # numbered in the order made
    assert len(pool) == 2


def test_pool_keys_are_any_hashable_shape():
    pool = SlotPool()
    key = ((2, 5), (2, 5))  # e.g. every input's shape
    slot = pool.get(key, lambda number: Slot({"input_ids": torch.zeros(2, 5)}, torch.zeros(2, 3), number))
    assert pool.get(key, lambda number: None) is slot and slot.graph_id == 1


def test_close_releases_every_slot_and_empties_the_pool():
    pool = SlotPool()
    slots = [pool.get((rows, 8), lambda number, rows=rows: _kv(rows, 8, number)) for rows in (1, 2, 3)]
    slots[0].binding, slots[1].graph = object(), object()
    pool.close()
    assert len(pool) == 0
    for slot in slots:
        assert (slot.inputs, slot.output, slot.graph, slot.binding, slot.past) == ({}, None, None, None, [])
    again = pool.get((1, 8), lambda number: _kv(1, 8, number))
    assert again is not slots[0] and again.graph_id == 1  # usable again, numbering restarts


def test_kv_slot_reset_and_positions():
    slot = _kv(2, 6)
    slot.mask.zero_()
    slot.set_length(4)
    assert slot.write.tolist() == [3]
    state = slot.positions_state()
    slot.set_length(6)
    slot.restore_positions(state)
    assert slot.write.tolist() == [3]
    assert slot.reset() is slot and slot.write.tolist() == [0] and bool(slot.mask.all())
    slot.logits = torch.ones(2, 1, 5)
    assert slot.output is slot.logits


def test_reordered_fills_in_place_or_takes_the_pools_slot_for_the_new_row_count():
    source = _kv(2, 4)
    for i, tensor in enumerate(source.past):
        tensor.copy_(torch.arange(2.0)[:, None, None, None] + 10 * i)
    source.mask[1, 0] = 0
    source.write.fill_(2)
    addresses = [t.data_ptr() for t in source.past]
    same = reordered(source, torch.tensor([1, 0]), lambda rows, length: None)
    assert same is source and [t.data_ptr() for t in same.past] == addresses  # captured graphs keep addresses
    assert same.past[1][:, 0, 0, 0].tolist() == [11.0, 10.0] and same.mask[:, 0].tolist() == [0, 1]
    wider = _kv(3, 4)
    got = reordered(source, torch.tensor([0, 0, 1]), lambda rows, length: wider if (rows, length) == (3, 4) else None)
    assert got is wider and wider.past[0][:, 0, 0, 0].tolist() == [1.0, 1.0, 0.0]
    assert wider.mask[:, 0].tolist() == [0, 0, 1] and wider.write.tolist() == [2]


@pytest.mark.parametrize("devices", [("cuda",), ("cuda", "cpu")], ids=["per-buffer", "stacked"])
def test_stacked_buffers_reorder_like_separate_ones_and_keep_their_addresses(devices, monkeypatch):
    """Buffers from `stacked_zeros` are views of one allocation (`stacked_view` finds it; separate ones have
    none), and a reorder over it (as CUDA does it, or buffer by buffer) gives what separate buffers give, in
    place."""
    monkeypatch.setattr(slots, "STACKED_DEVICES", devices)
    stacked, separate = _kv(3, 4, stacked=True), _kv(3, 4)
    assert stacked_view(stacked.past) is not None and stacked_view(separate.past) is None
    assert stacked_view(stacked.past[::-1]) is None  # out of order: not one [n, ...] view
    for slot in (stacked, separate):
        for i, tensor in enumerate(slot.past):
            tensor.copy_(torch.arange(3.0)[:, None, None, None] + 10 * i)
    addresses = [t.data_ptr() for t in stacked.past]
    index = torch.tensor([2, 2, 0])
    for slot in (stacked, separate):
        assert reordered(slot, index, lambda rows, length: None) is slot
    assert [t.data_ptr() for t in stacked.past] == addresses
    assert all(torch.equal(a, b) for a, b in zip(stacked.past, separate.past))
    assert stacked.past[2][:, 0, 0, 0].tolist() == [22.0, 22.0, 20.0]
