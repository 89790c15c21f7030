"""Where collnb still reads torch's words to blame a rank, each reading checked against the text the
pinned torch (2.13.0) really writes, produced on real gloo ranks here: a changed wording fails one of
these tests instead of silently changing whom a RankError blames.

Structured sources come first where torch has them (the Flight Recorder's entries,
``collnb.ranks.instrument.flight_recorder``; the wait each rank measured, ``which_timeout``); what is left to the
text: the DETAIL check's collective fingerprints and "differ in" line (``failures._mismatch``), the
timeout and closed-connection wordings (``timeouts.text_hint``) and torch's communication-error markers
(``tracebacks.is_comm_error``).
"""
from __future__ import annotations

import os
import time

import pytest
import torch
import torch.distributed as dist

import collnb
from collnb.ranks.explain import failures
from collnb.ranks.explain.failures import Ending
from collnb.ranks.instrument.timeouts import text_hint
from collnb.ranks.explain.tracebacks import is_comm_error

pytestmark = pytest.mark.skipif(torch.__version__.split("+")[0] != "2.13.0",
                                reason="the texts are those of the pinned torch 2.13.0")


def _mismatched_dtype(rank, world_size):
    t = torch.ones(4, dtype=torch.int64 if rank == world_size - 1 else torch.float32)
    try:
        dist.all_reduce(t)
    except Exception as exc:  # noqa: BLE001 - the text is what the test reads
        return type(exc).__name__, str(exc), is_comm_error(exc)
    return "", "", False


def _mismatched_op(rank, world_size):
    t = torch.ones(4)
    try:
        dist.broadcast(t, src=0) if rank == 0 else dist.all_reduce(t)
    except Exception as exc:  # noqa: BLE001
        return type(exc).__name__, str(exc), is_comm_error(exc)
    return "", "", False


def _all_to_all_against_all_reduce(rank, world_size):
    """Notebook 18's skipped collective: one rank's all_to_all_single meets the others' all_reduce."""
    try:
        if rank == 1:
            dist.all_to_all_single(torch.zeros(2 * world_size), torch.ones(2 * world_size))
        else:
            dist.all_reduce(torch.ones(4))
    except Exception as exc:  # noqa: BLE001
        return type(exc).__name__, str(exc), is_comm_error(exc)
    return "", "", False


def _recv_nobody_sends(rank, world_size):
    if rank == 0:
        try:
            dist.recv(torch.ones(4), src=1)
        except Exception as exc:  # noqa: BLE001
            return type(exc).__name__, str(exc), is_comm_error(exc)
    return None


def _peer_dies(rank, world_size, path):
    if rank == 1:
        time.sleep(0.3)
        os._exit(3)
    try:
        dist.recv(torch.ones(4), src=1)
    except Exception as exc:  # noqa: BLE001
        with open(path, "w") as fh:
            fh.write(f"{type(exc).__name__}\n{is_comm_error(exc)}\n{exc}")


def test_the_detail_checks_dtype_mismatch_is_read_as_torch_writes_it():
    got = collnb.launch(_mismatched_dtype, 3, debug=True)
    assert {exc_type for exc_type, _, _ in got} == {"RuntimeError"}
    assert not any(comm for _, _, comm in got)  # a mismatch is the ranks' own error, not a lost peer
    for rank, (_, text, _) in enumerate(got):
        assert failures._MISMATCH in text
        fps = dict(failures._FINGERPRINT.findall(failures._FINGERPRINT_NOISE.sub("", text)))
        assert sorted(fps) == sorted({str(rank), *fps})  # its own fingerprint and one peer's
        assert f"Rank {rank} is running collective" in text and len(fps) == 2
        assert all("OpType=ALLREDUCE" in fp and "TensorShape=[4]" in fp for fp in fps.values())
        assert "TensorOptions" not in "".join(fps.values())  # the noise is gone
        assert failures._DIFFER.search(text) is not None
    events = [Ending(r, "error", float(r), exc_type, text) for r, (exc_type, text, _) in enumerate(got)]
    root = failures._mismatch(events)
    assert root.rank == 2 and root.kind == "mismatch"  # the one rank that differs from both others
    assert root.message == "Collectives differ in: Tensor dtypes: Long vs Float"
    assert [ranks for _, ranks in root.value] == [[0, 1], [2]]
    assert "TensorDtypes=Long" in root.value[1][0] and "SequenceNumber" not in root.value[1][0]


def test_the_detail_checks_op_mismatch_names_the_rank_that_broadcast():
    got = collnb.launch(_mismatched_op, 3, debug=True)
    events = [Ending(r, "error", float(r), exc_type, text) for r, (exc_type, text, _) in enumerate(got)]
    root = failures._mismatch(events)
    assert root.rank == 0
    (many, many_ranks), (odd, odd_ranks) = root.value
    assert (many_ranks, odd_ranks) == ([1, 2], [0])
    assert "OpType=ALLREDUCE" in many and "OpType=BROADCAST" in odd
    assert root.message.startswith("Collectives differ in: ")


def test_fingerprints_of_two_kinds_are_read_from_each_ranks_own_account():
    """Issue 34: when the two calls differ in kind their fingerprints differ in length and torch (2.13, 2.15) misreads
    the other side's (rank 1 reads the others' all_reduce as OpType=GATHER, they read its all_to_all as
    OpType=REDUCE); each rank's account of its own call is right, and the summary is built from those."""
    got = collnb.launch(_all_to_all_against_all_reduce, 4, debug=True)
    texts = [text for _, text, _ in got]
    own = [dict(failures._FINGERPRINT.findall(failures._FINGERPRINT_NOISE.sub("", t)))[str(r)] for r, t in enumerate(texts)]
    assert "OpType=ALLTOALL_BASE" in own[1] and all("OpType=ALLREDUCE" in own[r] for r in (0, 2, 3))
    events = [Ending(r, "error", float(r), exc_type, text) for r, (exc_type, text, _) in enumerate(got)]
    root = failures._mismatch(events)
    assert root.rank == 1
    (many, many_ranks), (odd, odd_ranks) = root.value
    assert (many_ranks, odd_ranks) == ([0, 2, 3], [1])
    assert "OpType=ALLREDUCE" in many and odd == "OpType=ALLTOALL_BASE", root.value
    assert root.message == "Collectives differ in: Op type: ALLTOALL_BASE vs ALLREDUCE"


def test_a_real_timeout_is_read_as_the_timeout_it_names():
    (exc_type, text, comm), _ = collnb.launch(_recv_nobody_sends, 2, debug=False, collective_timeout=1.0)
    assert comm, text  # a rank that waited for a peer: a consequence, never a root cause
    assert "Timed out waiting 1000ms for recv operation to complete" in text
    assert text_hint(text) == (1.0, "")


def test_a_peer_that_died_is_read_as_a_closed_connection(tmp_path):
    path = tmp_path / "rank0.txt"
    with pytest.raises(collnb.RankError) as info:
        collnb.launch(_peer_dies, 2, args=(str(path),), debug=False, collective_timeout=5.0)
    assert info.value.rank == 1 and info.value.exc_type == "Exited"
    deadline = time.monotonic() + 5
    while not path.exists() and time.monotonic() < deadline:  # rank 0 may be stopped before it writes
        time.sleep(0.05)
    if not path.exists():
        pytest.skip("rank 0 was stopped before its recv failed")
    exc_type, comm, text = path.read_text().split("\n", 2)
    assert comm == "True", text
    assert text_hint(text) == (None, "peer closed"), text


def _mismatch_raises(rank, world_size):
    dist.all_reduce(torch.ones(4, dtype=torch.int64 if rank == world_size - 1 else torch.float32))


def test_a_rank_errors_explanation_is_chinese_and_torchs_own_words_are_kept():
    collnb.set_language("zh")
    try:
        with pytest.raises(collnb.RankError) as info:
            collnb.launch(_mismatch_raises, 3, debug=True)
    finally:
        collnb.set_language(None)
    text = str(info.value)
    assert info.value.rank == 2
    # collnb's own sentences, in Chinese (the glossary's words; rank and dtype stay in English)
    assert "rank 2 调用的集合通信操作与其他所有 rank 都不同（rank 0 和 1 一致）" in text
    assert "进程组中的每个 rank 都必须以相同的顺序、相同的形状和 dtype 调用相同的集合通信操作。" in text
    assert "\n\n每个 rank 的情况：\n" in text and "rank 2 的回溯（最近的调用在最后）：" in text
    assert "What happened to every rank" not in text and "Every rank of a group" not in text
    # torch's own words, as torch wrote them
    assert text.startswith("rank 2: RuntimeError: Detected mismatch between collectives on ranks: ")
    assert "OpType=ALLREDUCE, TensorShape=[4], TensorDtypes=Long" in text
    assert "Detected mismatch between collectives on ranks. Rank " in info.value.outcomes[0]


def test_the_same_error_in_english_is_worded_as_before():
    with pytest.raises(collnb.RankError) as info:
        collnb.launch(_mismatch_raises, 3, debug=True)
    text = str(info.value)
    assert text.startswith("rank 2: RuntimeError: Detected mismatch between collectives on ranks: rank 2 called a "
                           "different collective from every other rank (ranks 0 and 1 agree):\n")
    assert ("\nEvery rank of a group must call the same collectives, in the same order, with the same shapes and "
            "dtypes.\n\nTraceback of rank 2 (most recent call last):\n") in text
    assert "\n\nWhat happened to every rank:\n  rank 0: RuntimeError: Detected mismatch" in text
