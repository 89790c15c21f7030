"""A logger set up before the ranks started writes, from a rank, into the calling cell (issue 34)."""
import io
import logging
import sys

import collnb


def _log_a_warning(rank, world_size):
    logging.getLogger("collnb.test.inherited").warning("a warning from rank %d's call", rank)
    return rank


def test_a_handler_on_the_parents_stderr_writes_to_the_calling_cell(capsys):
    """torch gives its loggers a StreamHandler on ``sys.stderr`` when it is imported; in a notebook that
    is ipykernel's stream, which sent a forked rank's warning to the cell that started the ranks (12's
    DTensor warning under its first cell). A rank points such handlers at its own stderr, which the
    launcher relays, prefixed, to the cell whose call logged."""
    parent_stderr = io.StringIO()  # stands for the kernel's stream object, inherited by the fork
    log = logging.getLogger("collnb.test.inherited")
    handler = logging.StreamHandler(parent_stderr)
    log.addHandler(handler)
    log.propagate = False
    saved = sys.stderr
    try:
        collnb.shutdown()                      # ranks forked now, while sys.stderr is that stream
        sys.stderr = parent_stderr
        handler.setStream(parent_stderr)
        assert list(collnb.launch(lambda rank, world_size: rank, world_size=2)) == [0, 1]
        sys.stderr = saved
        capsys.readouterr()
        assert list(collnb.launch(_log_a_warning, world_size=2)) == [0, 1]
        err = capsys.readouterr().err
    finally:
        sys.stderr = saved
        log.removeHandler(handler)
        collnb.shutdown()
    for r in (0, 1):
        assert f"[rank {r}] a warning from rank {r}'s call" in err, err
    assert "a warning from rank" not in parent_stderr.getvalue()
