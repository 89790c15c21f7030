"""collnb.views.calls: a launch's recorded collectives lined up as steps (per rank: operation,
group and mesh dimension, shapes, bytes, count), written as text and painted as a picture."""
import numpy as np
import pytest
import torch

import collnb
from collnb import CallRecord
from collnb.views import calls as C
from collnb.views.palette import MIN_LABEL_PX, contrast_ratio, rank_color


def R(name, ranks, shapes=((1, 6), (2, 6)), nbytes=48, source="DTensor", dtypes=("float32", "float32")):
    return CallRecord(name, None, len(ranks), shapes, dtypes, None, tuple(ranks), nbytes, source, 0)


#: (S(0), S(0)) -> (R, S(0)) on a 2x2 mesh, as torch 2.13 issues it: an all_gather along mesh dim 1
#: (rows [0, 1], [2, 3]), then along mesh dim 0 (columns [0, 2], [1, 3]).
ROW = {0: (0, 1), 1: (0, 1), 2: (2, 3), 3: (2, 3)}
COL = {0: (0, 2), 1: (1, 3), 2: (0, 2), 3: (1, 3)}
TWO_STEPS = [[R("all_gather_into_tensor", ROW[r]),
              R("all_gather_into_tensor", COL[r], ((2, 6), (4, 6)), 96)] for r in range(4)]


def test_mesh_dims_of_names_rows_columns_and_the_whole_mesh():
    assert C.mesh_dims_of((0, 1), (2, 2)) == (1,)
    assert C.mesh_dims_of((2, 3), (2, 2)) == (1,)
    assert C.mesh_dims_of((1, 3), (2, 2)) == (0,)
    assert C.mesh_dims_of((0, 1, 2, 3), (2, 2)) == (0, 1)
    assert C.mesh_dims_of((0, 3), (2, 2)) is None          # a diagonal is no sub-mesh
    assert C.mesh_dims_of((0, 1, 2, 3), (4,)) == (0,)
    assert C.mesh_dims_of((4, 5, 6, 7), (2, 4)) == (1,)
    assert C.mesh_dims_of((1, 5), (2, 4)) == (0,)
    # a mesh given by its ranks (DeviceMesh.mesh.tolist()), not laid out row-major
    assert C.mesh_dims_of((3, 1), [[3, 2], [1, 0]]) == (0,)
    assert C.mesh_dims_of((0, 1), None) is None


def test_mesh_ranks_rejects_what_is_no_mesh():
    with pytest.raises(ValueError, match="sizes >= 1"):
        C.mesh_ranks((2, 0))
    with pytest.raises(ValueError, match="each rank once"):
        C.mesh_ranks([[0, 1], [1, 2]])
    assert C.mesh_ranks((2, 3)).tolist() == [[0, 1, 2], [3, 4, 5]]


def test_steps_line_up_each_ranks_operations():
    steps = C.call_steps(TWO_STEPS, mesh=(2, 2))
    assert [s.kind for s in steps] == ["all_gather_into_tensor"] * 2
    assert steps[0].groups == ((0, 1), (2, 3)) and steps[0].mesh_dim == (1,)
    assert steps[1].groups == ((0, 2), (1, 3)) and steps[1].mesh_dim == (0,)
    assert steps[1].nbytes == {0: 96, 1: 96, 2: 96, 3: 96}
    assert steps[0].record(2).group_ranks == (2, 3) and steps[0].ranks == (0, 1, 2, 3)
    # start/stop per rank keep a slice of each rank's records
    only_second = C.call_steps(TWO_STEPS, mesh=(2, 2), start=[1, 1, 1, 1])
    assert len(only_second) == 1 and only_second[0].mesh_dim == (0,) and only_second[0].index == 0
    assert C.call_steps(TWO_STEPS, stop=1)[0].mesh_dims == {(0, 1): None, (2, 3): None}


def test_merge_counts_identical_consecutive_steps_and_mixed_kinds_are_named():
    four = [[R("all_gather_into_tensor", (0, 1))] * 4 + [R("reduce_scatter_tensor", (0, 1))] for _ in range(2)]
    steps = C.call_steps(four, merge=True)
    assert [(s.kind, s.count) for s in steps] == [("all_gather_into_tensor", 4), ("reduce_scatter_tensor", 1)]
    assert C.call_counts(four) == [{"all_gather_into_tensor": 4, "reduce_scatter_tensor": 1}] * 2
    text = C.calls_text(four, merge=True)
    assert "step 1 ×4: all_gather_into_tensor" in text and "step 5: reduce_scatter_tensor" in text
    mixed = [[R("send", (0, 1))], [R("recv", (0, 1))]]
    assert C.call_steps(mixed)[0].kind == "mixed (send, recv)"


def test_text_names_the_mesh_dimension_group_shapes_and_bytes():
    text = C.calls_text(TWO_STEPS, mesh=(2, 2), dim_names=("dp", "tp"))
    lines = text.splitlines()
    assert lines[0] == "step 1: all_gather_into_tensor over mesh dim 1 ('tp'); groups [0, 1] [2, 3]"
    assert "rank 2 (1, 0)" in lines[3] and "group [2, 3]" in lines[3] and "(1, 6) → (2, 6) float32" in lines[3]
    assert lines[3].endswith("48 B")
    assert "step 2: all_gather_into_tensor over mesh dim 0 ('dp'); groups [0, 2] [1, 3]" in text
    assert "rank 3: 2 operation(s), 144 B; all_gather_into_tensor ×2" in text
    assert C.calls_text([[], []]) == "no communication recorded"


def test_every_operation_that_reads_one_tensor_and_writes_another_shows_input_arrow_output():
    """Issue 34: FSDP2's all_gathers read "(108,) (54,)", output then input in the operator's argument
    order, with no arrow: an operation recorded output first reads input → output, like a functional one."""
    for name, out, inp in (("all_gather_into_tensor", (108,), (54,)), ("reduce_scatter_tensor", (54,), (108,)),
                           ("all_gather_single", (16, 8), (4, 8)), ("reduce_scatter_single", (4, 8), (16, 8)),
                           ("all_to_all_single", (8,), (8,))):
        for source in ("torch.distributed", "ProcessGroup"):
            rec = R(name, (0, 1), shapes=(out, inp), source=source, dtypes=("float64", "float64"))
            want = f"({', '.join(map(str, inp))}{',' if len(inp) == 1 else ''}) → " \
                   f"({', '.join(map(str, out))}{',' if len(out) == 1 else ''}) float64"
            assert C._shapes_text(rec) == want, (name, source)
    # a functional collective's (DTensor's) shapes are already input, then output
    assert C._shapes_text(R("all_gather_into_tensor", (0, 1))) == "(1, 6) → (2, 6) float32"
    # one tensor read and written, or a list form: no arrow
    assert C._shapes_text(R("all_reduce", (0, 1), shapes=((4,),), source="ProcessGroup",
                            dtypes=("float32",))) == "(4,) float32"
    assert C._shapes_text(R("all_gather", (0, 1), shapes=((2,), (2,), (2,)), source="torch.distributed",
                            dtypes=("float32",) * 3)) == "(2,) (2,) (2,) float32"


def test_bad_calls_are_named():
    with pytest.raises(TypeError, match="record_calls=True"):
        C.call_steps("all_gather")
    with pytest.raises(TypeError, match="rank 0's calls"):
        C.call_steps([3])
    with pytest.raises(ValueError, match="one int per rank"):
        C.call_steps(TWO_STEPS, start=[1, 1])


def test_picture_joins_each_groups_ranks_in_its_colour_and_keeps_labels_readable():
    img = C.calls_image(TWO_STEPS, mesh=(2, 2), dim_names=("dp", "tp"), title="test")
    assert img.pixels.dtype == np.uint8 and img.pixels.shape[1] <= C.MAX_WIDTH_PX
    assert not [t for t, s, _ in img.labels if s < MIN_LABEL_PX]
    texts = [t for t, _, _ in img.labels]
    assert "[0,1] dim 1 tp" in texts and "[1,3] dim 0 dp" in texts and "96 B" in texts
    # step 2: ranks 0 and 2 share a group; their cells' left edges carry the same group colour,
    # ranks 1 and 3 the other one
    edge = {r: tuple(img.pixels[(img.cells[(1, r)][1] + img.cells[(1, r)][3]) // 2, img.cells[(1, r)][0] + 1])
            for r in range(4)}
    assert edge[0] == edge[2] != edge[1] == edge[3]
    # every group colour is readable on every rank's tinted cell
    for color in C._GROUP_COLORS:
        fg = np.array([int(color[i:i + 2], 16) for i in (1, 3, 5)]) / 255
        for r in range(16):
            assert contrast_ratio(fg, np.array(C._tint(rank_color(r))) / 255) >= 4.5, (color, r)


def _P(name, peer, ranks=(0, 1)):
    return CallRecord(name, peer, len(ranks), ((4,),), ("float32",), None, tuple(ranks), 16, "torch.distributed", 0)


def test_point_to_point_cells_name_the_peer_and_rooted_ones_the_root():
    calls = [[_P("send", 1), _P("broadcast", 1)], [_P("recv", 0), _P("broadcast", 1)]]
    texts = [t for t, _, _ in C.calls_image(calls).labels]
    assert "16 B  to 1" in texts and "16 B  from 0" in texts and texts.count("16 B  root 1") == 2


def test_a_title_wider_than_the_picture_widens_it_then_wraps_and_is_never_cut():
    one = [[_P("all_reduce", None)], [_P("all_reduce", None)]]
    narrow = C.calls_image(one)
    title = "a title of some length, wider than one step's picture"
    img = C.calls_image(one, title=title)
    assert narrow.pixels.shape[1] < img.pixels.shape[1] <= C.MAX_WIDTH_PX
    long = " ".join(["every operation each rank issued, recorded where torch dispatched it"] * 3)
    img = C.calls_image(one, title=long)
    lines = [t for t, s, _ in img.labels if s == 14]
    assert len(lines) >= 2 and " ".join(lines) == long      # wrapped, every word kept
    for _, _, box in img.labels:
        assert 0 <= box[0] and box[2] <= img.pixels.shape[1]   # nothing painted past the edge


def test_many_steps_wrap_into_bands_no_wider_than_the_output_area():
    many = [[R("all_reduce", (0, 1), ((3,),), 12, "torch.distributed", ("float32",))] * 12 for _ in range(2)]
    img = C.calls_image(many, merge=False)
    assert img.pixels.shape[1] <= C.MAX_WIDTH_PX and len(img.steps) == 12
    per_band = (C.MAX_WIDTH_PX - C._LABEL_W - 2 * C._PAD) // C._COL_W
    ys = sorted({img.cells[(i, 0)][1] for i in range(12)})
    assert len(ys) == -(-12 // per_band)  # one row of cells per band
    assert C.calls_image([[], []]).labels[0][0] == "no communication recorded"


def _redistribute_2x2(rank, world_size):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from collnb.ranks.instrument import recording
    mesh = init_device_mesh("cpu", (2, 2))
    d = distribute_tensor(torch.arange(24.).reshape(4, 6), mesh, [Shard(0), Shard(0)], src_data_rank=None)
    start = len(recording.active().records())
    d.redistribute(mesh, [Replicate(), Shard(0)])
    return start


def test_a_real_launch_on_a_2x2_mesh():
    res = collnb.launch(_redistribute_2x2, 4, record_calls=True)
    view = C.CallsView(res, mesh=(2, 2), start=list(res))
    # a (1, 6) shard gathered over 2 ranks is (2, 6) = 48 B, then gathered over 2 more (4, 6) = 96 B;
    # torch 2.13 gathers along mesh dim 1 first (measured)
    assert [(s.kind, s.mesh_dim, s.nbytes[0]) for s in view.steps] == [
        ("all_gather_into_tensor", (1,), 48), ("all_gather_into_tensor", (0,), 96)]
    assert view.counts == [{"all_gather_into_tensor": 2}] * 4
    assert view._repr_png_()[:8] == b"\x89PNG\r\n\x1a\n" and str(view).startswith("step 1:")
