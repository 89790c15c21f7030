"""The exercise checks of notebooks 13-15 (collnb.exercises.check_tensor_parallel_mlp,
check_fsdp_prefetch, check_online_softmax) cannot be fooled: answers that skip the asked
communication, reduce the wrong tensor, communicate inside a pure function, prefetch in the wrong
places or forget a rescaling get ✗ and a hint about that mistake. (Each notebook's own solution
passing and its untouched exercise getting "not answered yet" is tests/test_exercises.py.)"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from collnb import exercises
from collnb.labs.exercises import CheckFailed

F = torch.nn.functional


def _fails(capsys, check, answer, *, hint: str = "", what: str = "") -> str:
    with pytest.raises(CheckFailed) as info:
        check(answer)
    out = capsys.readouterr().out
    assert "✓" not in out, out
    msg = str(info.value)
    assert msg.startswith("✗ ") and "\nHint: " in msg, msg
    assert hint in msg.split("\nHint: ", 1)[1], msg
    assert what in msg, msg
    return msg


# --- 13 · tensor parallel MLP --------------------------------------------------------------------

def test_tp_mlp_without_communication_fails(capsys):
    def local(rank, world_size, x, w1, b1, w2):
        return F.gelu(x @ w1.t() + b1) @ w2.t()        # one rank's share only

    _fails(capsys, exercises.check_tensor_parallel_mlp, local, what="exactly one dist.all_reduce")


def test_tp_mlp_reducing_before_the_gelu_fails_on_the_size(capsys):
    def early(rank, world_size, x, w1, b1, w2):
        h = x @ w1.t() + b1
        dist.all_reduce(h)                              # (s, f/t), and GeLU is not linear
        return F.gelu(h) @ w2.t()

    _fails(capsys, exercises.check_tensor_parallel_mlp, early, hint="GeLU is not linear", what="values")


def test_tp_mlp_through_a_functional_collective_or_two_all_reduces_fails(capsys):
    def functional(rank, world_size, x, w1, b1, w2):
        import torch.distributed._functional_collectives as fc
        return fc.all_reduce(F.gelu(x @ w1.t() + b1) @ w2.t(), "sum", dist.group.WORLD)

    _fails(capsys, exercises.check_tensor_parallel_mlp, functional, what="does not allow")

    def twice(rank, world_size, x, w1, b1, w2):
        y = F.gelu(x @ w1.t() + b1) @ w2.t()
        dist.all_reduce(y)
        dist.all_reduce(torch.zeros(1))
        return y

    _fails(capsys, exercises.check_tensor_parallel_mlp, twice, what="exactly one dist.all_reduce")


def test_tp_mlp_forgetting_the_bias_fails_on_the_values(capsys):
    def no_bias(rank, world_size, x, w1, b1, w2):
        y = F.gelu(x @ w1.t()) @ w2.t()
        dist.all_reduce(y)
        return y

    _fails(capsys, exercises.check_tensor_parallel_mlp, no_bias, what="other than the MLP's output")


# --- 14 · FSDP2 prefetch --------------------------------------------------------------------------

def test_prefetch_forward_only_or_one_deep_fails_with_the_order_table(capsys):
    def forward_only(blocks):
        for a, b in zip(blocks, blocks[1:]):
            a.set_modules_to_forward_prefetch([b])

    msg = _fails(capsys, exercises.check_fsdp_prefetch, forward_only, what="backward", hint="two blocks before it")
    assert "gathered when its forward began" in msg


def test_prefetch_with_a_collective_of_its_own_fails(capsys):
    def chatty(blocks):
        for a, b in zip(blocks, blocks[1:]):
            a.set_modules_to_forward_prefetch([b])
        dist.barrier()

    _fails(capsys, exercises.check_fsdp_prefetch, chatty, what="configure made barrier")


# --- 15 · online softmax --------------------------------------------------------------------------

def _right(o, m, l, scores, v):
    m_new = torch.maximum(m, scores.max(-1).values)
    scale = torch.exp(m - m_new)
    p = torch.exp(scores - m_new[:, None])
    return o * scale[:, None] + p @ v, m_new, l * scale + p.sum(-1)


def test_online_softmax_without_rescaling_fails(capsys):
    def no_rescale(o, m, l, scores, v):
        m_new = torch.maximum(m, scores.max(-1).values)
        p = torch.exp(scores - m_new[:, None])
        return o + p @ v, m_new, l + p.sum(-1)

    _fails(capsys, exercises.check_online_softmax, no_rescale, hint="BOTH the old o and the old l")


def test_online_softmax_rescaling_only_the_sum_fails(capsys):
    def half(o, m, l, scores, v):
        o2, m2, l2 = _right(o, m, l, scores, v)
        p = torch.exp(scores - m2[:, None])
        return o + p @ v, m2, l2

    _fails(capsys, exercises.check_online_softmax, half, what="other than full attention")


def test_online_softmax_that_communicates_fails(capsys):
    def chatty(o, m, l, scores, v):
        dist.all_reduce(torch.zeros(1))
        return _right(o, m, l, scores, v)

    _fails(capsys, exercises.check_online_softmax, chatty, what="update must not communicate")


# --- 15 · passing K and V round the ring ----------------------------------------------------------

def test_kv_ring_pass_the_library_step_passes(capsys):
    from collnb.labs.parallel import ring_step
    exercises.check_kv_ring_pass(ring_step)
    assert "✓" in capsys.readouterr().out


def test_kv_ring_pass_the_wrong_way_round_fails_on_the_peers(capsys):
    def backwards(send, recv, rank, world_size):
        nxt, prev = (rank - 1) % world_size, (rank + 1) % world_size
        return dist.batch_isend_irecv([dist.P2POp(dist.isend, t, nxt) for t in send]
                                      + [dist.P2POp(dist.irecv, t, prev) for t in recv])

    _fails(capsys, exercises.check_kv_ring_pass, backwards, what="isend to rank")


def test_kv_ring_pass_with_blocking_sends_never_meets(capsys):
    def blocking(send, recv, rank, world_size):
        for t in send:
            dist.send(t, (rank + 1) % world_size)      # every rank sends first: each waits for its receiver
        for t in recv:
            dist.recv(t, (rank - 1) % world_size)
        return []

    _fails(capsys, exercises.check_kv_ring_pass, blocking, hint="batch_isend_irecv")


def test_kv_ring_pass_without_communication_fails(capsys):
    def copy_only(send, recv, rank, world_size):
        for s, r in zip(send, recv):
            r.copy_(s)                                   # keeps its own block: never sees the others'
        return []

    _fails(capsys, exercises.check_kv_ring_pass, copy_only, what="isend to rank")
