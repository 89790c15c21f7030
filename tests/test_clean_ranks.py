"""Warm ranks as clean as a fresh script: what one call changes is gone in the next, what cannot be
put back retires the ranks, and the last ways a rank could escape or break the pool (output without
a newline, a rank that dies at its start, a double-forked daemon, another PID namespace's sweep)."""
import fcntl
import os
import signal  # noqa: F401 - the probes below use it
import subprocess
import sys
import textwrap
import time

import psutil
import pytest
import torch
import torch.distributed as dist

import collnb
from collnb.ranks.local import processes
from conftest import live_children, pool_dirs


def _probe(rank, world_size, probe):
    import gc, logging, random, socket, warnings  # noqa: E401, F401 - names the probes use
    return eval(probe)


def _change_then_probe(rank, world_size, change, probe):
    import gc, logging, random, socket, warnings  # noqa: E401, F401
    exec(change)
    return eval(probe)


#: Each global change a learner's call may make: (the change, an expression that shows it).
GLOBAL_CHANGES = {
    "os.environ": ("os.environ['COLLNB_SET'] = 'x'; os.environ['HOME'] = '/nowhere'; del os.environ['PATH']",
                   "(os.environ.get('COLLNB_SET'), os.environ.get('HOME'), os.environ.get('PATH'))"),
    "TZ": ("os.environ['TZ'] = 'Asia/Kolkata'; time.tzset()", "time.strftime('%z', time.localtime(0))"),
    "default dtype": ("torch.set_default_dtype(torch.float64)", "torch.ones(1).dtype"),
    "grad mode": ("torch.set_grad_enabled(False)", "torch.ones(1, requires_grad=True).mul(2).requires_grad"),
    "no_grad entered": ("torch.no_grad().__enter__()", "torch.is_grad_enabled()"),
    "anomaly detection": ("torch.autograd.set_detect_anomaly(True, check_nan=False)",
                          "(torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled())"),
    "deterministic algorithms": ("torch.use_deterministic_algorithms(True, warn_only=True)",
                                 "(torch.are_deterministic_algorithms_enabled(), "
                                 "torch.is_deterministic_algorithms_warn_only_enabled())"),
    "default device": ("torch.set_default_device('meta')", "torch.empty(1).device.type"),
    "device context entered": ("torch.device('meta').__enter__()", "torch.empty(1).device.type"),
    "matmul precision": ("torch.set_float32_matmul_precision('medium')", "torch.get_float32_matmul_precision()"),
    "fp32 precision": ("torch.backends.mkldnn.matmul.fp32_precision = 'bf16'",
                       "torch.backends.mkldnn.matmul.fp32_precision"),
    "cudnn flags": ("torch.backends.cudnn.benchmark = True; torch.backends.cudnn.deterministic = True",
                    "(torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic)"),
    "autocast entered": ("torch.autocast('cpu', dtype=torch.bfloat16).__enter__()",
                         "(torch.ones(2, 2) @ torch.ones(2, 2)).dtype"),
    "a dispatch mode entered": ("from torch.distributed.tensor.debug import CommDebugMode; CommDebugMode().__enter__()",
                                "torch.utils._python_dispatch._get_current_dispatch_mode() is None"),
    "warn always": ("torch.set_warn_always(True)", "torch.is_warn_always_enabled()"),
    "print options": ("torch.set_printoptions(precision=1)", "str(torch.tensor([1.23456]))"),
    "thread count": ("torch.set_num_threads(2)", "torch.get_num_threads()"),
    "distributed debug level": ("dist.set_debug_level(dist.DebugLevel.OFF)", "dist.get_debug_level().name"),
    "sys.path": ("sys.path.insert(0, '/nowhere'); sys.path.append('/elsewhere')", "sys.path[:1] + sys.path[-1:]"),
    "sys.path replaced": ("sys.path = ['/nowhere']", "sys.path[:1]"),
    "sys.argv": ("sys.argv[:] = ['learner.py', '--flag']", "tuple(sys.argv)"),
    # low, yet above the depth the function runs at (a rank starts at the depth its kernel forked
    # it from: a fixed 60 failed for ranks forked deep in a test run)
    "recursion limit": ("import traceback; sys.setrecursionlimit(len(traceback.extract_stack()) + 40)",
                        "sys.getrecursionlimit()"),
    "switch interval": ("sys.setswitchinterval(0.5)", "sys.getswitchinterval()"),
    "int digit limit": ("sys.set_int_max_str_digits(640)", "sys.get_int_max_str_digits()"),
    "excepthook": ("sys.excepthook = print", "sys.excepthook is print"),
    "trace function": ("sys.settrace(lambda *a: None)", "sys.gettrace() is None"),
    "umask": ("os.umask(0o077)", "(lambda m: (os.umask(m), m)[1])(os.umask(0))"),
    "signal handlers": ("signal.signal(signal.SIGUSR2, lambda *a: None); signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                        "signal.signal(signal.SIGINT, signal.default_int_handler)",
                        "[getattr(h, '__qualname__', str(h)) for h in map(signal.getsignal, "
                        "(signal.SIGUSR2, signal.SIGTERM, signal.SIGINT))]"),
    "faulthandler's signal": ("signal.signal(signal.SIGUSR1, signal.SIG_IGN)", "signal.getsignal(signal.SIGUSR1)"),
    "signal mask": ("signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2})",
                    "sorted(signal.pthread_sigmask(signal.SIG_BLOCK, []))"),
    "interval timer": ("signal.setitimer(signal.ITIMER_PROF, 100)", "signal.getitimer(signal.ITIMER_PROF)"),
    "soft resource limit": ("import resource; soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE); "
                            "resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 4096) - 1, hard))",
                            "__import__('resource').getrlimit(__import__('resource').RLIMIT_NOFILE)"),
    "CPU affinity": ("os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})", "sorted(os.sched_getaffinity(0))"),
    "warnings filters": ("warnings.simplefilter('ignore')", "[f[0] for f in warnings.filters[:2]]"),
    "showwarning": ("warnings.showwarning = lambda *a, **k: None", "warnings.showwarning.__name__"),
    "logging": ("logging.disable(logging.CRITICAL); logging.getLogger().setLevel(logging.DEBUG); "
                "logging.getLogger().addHandler(logging.NullHandler())",
                "(logging.root.manager.disable, logging.getLogger().level, len(logging.getLogger().handlers))"),
    "garbage collector": ("gc.disable(); gc.set_threshold(1, 1, 1)", "(gc.isenabled(), gc.get_threshold())"),
    "socket timeout": ("socket.setdefaulttimeout(0.001)", "socket.getdefaulttimeout()"),
}


@pytest.mark.parametrize("change", sorted(GLOBAL_CHANGES))
def test_a_global_change_is_gone_in_the_next_call(change, capfd):
    code, probe = GLOBAL_CHANGES[change]
    fresh = collnb.launch(_probe, 2, args=(probe,))
    capfd.readouterr()  # an earlier test's ranks, retired, may have been replaced by this first call: not ours
    changed = collnb.launch(_change_then_probe, 2, args=(code, probe))
    assert changed != fresh, f"{change}: the change did not take effect in its own call ({changed})"
    pids = collnb.ranks.warm_pool().pids()[:2]
    assert collnb.launch(_probe, 2, args=(probe,)) == fresh
    assert collnb.launch(_probe, 2, args=(probe,)) == fresh
    # undone, not papered over by fresh ranks: every one of these can be put back
    assert collnb.ranks.warm_pool().pids()[:2] == pids
    assert "starting fresh ranks" not in capfd.readouterr().err


def test_every_change_of_the_list_at_once_is_gone_and_backward_works():
    order = sorted(GLOBAL_CHANGES, key=lambda name: name == "recursion limit")  # the call itself needs its stack
    every = "; ".join(GLOBAL_CHANGES[name][0] for name in order)
    probes = "[" + ", ".join(probe for _, probe in GLOBAL_CHANGES.values()) + "]"
    fresh = collnb.launch(_probe, 2, args=(probes,))
    collnb.launch(_change_then_probe, 2, args=(every, "0"))
    assert collnb.launch(_probe, 2, args=(probes,)) == fresh

    def train(rank, world_size):
        w = torch.ones(3, requires_grad=True)
        (w * torch.arange(3.)).sum().backward()
        dist.all_reduce(w.grad)
        return w.grad.tolist()

    assert collnb.launch(train, 2) == [[0.0, 2.0, 4.0]] * 2  # the issue's "element 0 ... does not require grad"


def _draw(rank, world_size):
    import random
    import numpy
    return (torch.rand(1).item(), random.random(), float(numpy.random.rand()))


def test_random_numbers_are_fresh_in_every_call_and_rank_as_in_a_new_script():
    first, second = collnb.launch(_draw, 2), collnb.launch(_draw, 2)
    draws = first + second
    for k in range(3):  # torch, random, numpy: no two ranks or calls draw the same
        assert len({d[k] for d in draws}) == 4, draws
    seeded = collnb.launch(lambda r, w: (torch.manual_seed(0), __import__("random").seed(0),
                                         __import__("numpy").random.seed(0), _draw(r, w))[-1], 2)
    assert seeded[0] == seeded[1]
    assert all(d != seeded[0] for d in collnb.launch(_draw, 2))  # the seed does not carry over


def test_a_module_of_the_learners_own_is_imported_afresh_in_each_call(tmp_path):
    (tmp_path / "learner_mod.py").write_text("VALUE = 1\n")

    def use(rank, world_size, folder):
        was_there = "learner_mod" in sys.modules
        sys.path.insert(0, folder)
        import learner_mod
        return was_there, learner_mod.VALUE

    assert collnb.launch(use, 2, args=(str(tmp_path),)) == [(False, 1)] * 2
    (tmp_path / "learner_mod.py").write_text("VALUE = 2\n")
    os.utime(tmp_path / "learner_mod.py", (time.time() + 5, time.time() + 5))
    assert collnb.launch(use, 2, args=(str(tmp_path),)) == [(False, 2)] * 2
    # a library module stays imported (importing it again gives the same code)
    assert collnb.launch(lambda r, w: (__import__("json"), "json" in sys.modules)[1], 2) == [True] * 2


def _replace_on_rank_2(rank, world_size, target):
    if rank == 2:
        exec(target)
    return rank


#: What a call may replace that cannot be put back, and the words the launcher uses for it.
REPLACED = {
    "dist.all_reduce = lambda t, *a, **k: t.mul_(0)": "replaced torch.distributed.all_reduce",
    "torch.nn.functional.relu = lambda x, inplace=False: x": "replaced torch.nn.functional.relu",
    "torch.add = torch.sub": "replaced torch.add",
    "torch.Tensor.add_ = lambda self, *a, **k: self": "replaced torch.Tensor.add_",
    "torch.nn.Module.__call__ = lambda self, *a, **k: None": "replaced torch.nn.Module.__call__",
    "del dist.broadcast": "deleted torch.distributed.broadcast",
    "import builtins; builtins.print = lambda *a, **k: None": "replaced builtins.print",
    "torch.distributed.distributed_c10d.all_gather = None": "replaced torch.distributed.distributed_c10d.all_gather",
    "import numpy; numpy.sum = len": "replaced numpy.sum",
    "import collnb.ranks.serialization as s; s.loads = print": "replaced collnb.ranks.serialization.loads",
    "class Mine: pass\ntorch.distributed.Mine = Mine": "added torch.distributed.Mine",
    "import collnb; collnb._kept = [torch.inference_mode()]; collnb._kept[0].__enter__()": "left inference mode on",
    "import threading; threading.Thread(target=__import__('time').sleep, args=(30,), daemon=True).start()":
        "left thread 'Thread-",
}


@pytest.mark.parametrize("target", list(REPLACED))
def test_a_change_that_cannot_be_put_back_retires_the_ranks(target, capfd):
    collnb.launch(lambda r, w: r, 4)
    old = collnb.ranks.warm_pool().pids()
    assert collnb.launch(_replace_on_rank_2, 4, args=(target,)) == [0, 1, 2, 3]  # the call itself returns
    capfd.readouterr()
    assert collnb.launch(lambda r, w: r, 4) == [0, 1, 2, 3]
    err = capfd.readouterr().err
    line = [ln for ln in err.splitlines() if ln.startswith("[collnb]")]
    assert len(line) == 1, err
    assert line[0].startswith(f"[collnb] the last call {REPLACED[target]}") and \
        line[0].endswith(" on rank 2; starting fresh ranks"), line
    assert not set(collnb.ranks.warm_pool().pids()) & set(old)  # fresh ranks


def test_the_issues_example_line_and_right_values_after_a_patched_all_reduce(capfd):
    def patch(rank, world_size):
        if rank == 2:
            dist.all_reduce = lambda t, *a, **k: t.mul_(0)
        return rank

    collnb.launch(patch, 4)
    capfd.readouterr()
    res = collnb.run("all_reduce", world_size=4)  # collnb's own tool, right after
    assert capfd.readouterr().err.splitlines()[0] == (
        "[collnb] the last call replaced torch.distributed.all_reduce on rank 2; starting fresh ranks")
    assert res.ok and [t.tolist() for t in res.after] == [[60.0, 64.0, 68.0, 72.0]] * 4


def test_collnbs_own_wrappers_and_torchs_own_patches_never_retire_the_ranks(capfd):
    def uses_torch(rank, world_size):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Replicate, Shard, distribute_tensor
        mesh = init_device_mesh("cpu", (world_size,))  # imports torch._dynamo, which wraps torch.manual_seed
        t = distribute_tensor(torch.arange(4.), mesh, [Shard(0)]).redistribute(mesh, [Replicate()])
        return t.to_local().tolist()

    collnb.launch(lambda r, w: r, 2)
    pids = collnb.ranks.warm_pool().pids()
    assert collnb.launch(uses_torch, 2, record_calls=True) == [[0.0, 1.0, 2.0, 3.0]] * 2
    assert collnb.run("all_gather", world_size=2).ok
    assert collnb.ranks.warm_pool().pids() == pids and not collnb.ranks.warm_pool().retired
    assert "[collnb]" not in capfd.readouterr().err


def test_a_lazy_name_loaded_inside_a_call_does_not_retire_the_ranks(tmp_path):
    """The views facade imports its names the first time they are asked for (PEP 562 ``__getattr__``)
    and keeps them in its namespace: a class of collnb's filled in that way is not a learner's change
    (CI's notebook ``algorithms`` printed "[collnb] the last call added collnb.views.Picture; ...
    starting fresh ranks"). In a kernel of its own, where collnb.views is imported and none of those
    names asked for yet when the ranks start."""
    script = tmp_path / "lazy.py"
    script.write_text(textwrap.dedent("""
        import sys, collnb, collnb.views
        def asks(rank, world_size):
            import collnb.views as views
            return [getattr(views, n).__name__ for n in ("Picture", "Binder", "MatrixPanel")]
        assert "Picture" not in vars(collnb.views), "the names are loaded already: the test shows nothing"
        pids = (collnb.launch(lambda r, w: r, 2), collnb.ranks.warm_pool().pids())[1]
        print(collnb.launch(asks, 2)[1], collnb.launch(lambda r, w: r, 2))
        print(collnb.ranks.warm_pool().pids() == pids)
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["['Picture', 'Binder', 'MatrixPanel'] [0, 1]", "True"], done.stdout
    assert "[collnb]" not in done.stderr, done.stderr


def test_collnbs_own_calls_leave_every_probe_as_fresh_and_are_not_cleaned_up_after():
    """collnb's own rank code (run, run_algorithm, bench) changes nothing, so the ranks skip putting
    themselves back after it (a warm slider move costs nothing more); every probe above agrees."""
    from collnb import bench
    from collnb.ranks.fresh.rank_state import collnb_only
    from collnb.collectives.rank_calls import rank_cases
    from collnb.labs.exercises.framework import _run_recorded
    assert collnb_only(rank_cases, ([{"primitive": "all_reduce"}], "gloo"))
    assert not collnb_only(_run_recorded, (_probe, [()], None))  # an exercise check runs the learner's code
    assert not collnb_only(_probe, ())
    probes = "[" + ", ".join(probe for _, probe in GLOBAL_CHANGES.values()) + "]"
    fresh = collnb.launch(_probe, 2, args=(probes,))
    collnb.run("all_reduce", world_size=2, dtype="int8")
    collnb.run_algorithm("all_reduce", "ring", world_size=2)
    bench.bench("all_reduce", 2, "64", iters=1, warmup=0, references=False, progress=False)
    assert collnb.launch(_probe, 2, args=(probes,)) == fresh


# -- 2: output without a newline ---------------------------------------------------------------

_WRITES_WITHOUT_NEWLINE = textwrap.dedent("""
    import resource, sys, collnb
    def writer(rank, world_size, mib):
        for _ in range(mib):
            sys.stdout.write("x" * (1 << 20))
        sys.stdout.flush()
        return rank
    collnb.launch(writer, 1, args=(1,))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    collnb.launch(writer, 1, args=(int(sys.argv[1]),), timeout=300)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    collnb.shutdown()
    sys.stderr.write(f"peak RSS {before} KiB -> {after} KiB\\n")
    sys.stderr.write(f"GROWTH {(after - before) * 1024}\\n")
""")


def test_output_without_a_newline_keeps_the_launchers_memory_bounded(tmp_path):
    """A rank writes 128 MiB without a newline. The launcher passes it on in pieces (its peak RSS
    grows by a small fraction of the bytes written; it held them whole before: 276 MB -> 2.3 GB for
    512 MiB) and the cell shows SHOWN_BYTES of it (4 MiB), then one line saying how much was cut, so
    the kernel and the notebook do not grow by 128 MiB either."""
    from collnb.ranks.local.output import PIECE_BYTES, READ_BYTES, SHOWN_BYTES

    mib = 128
    out = tmp_path / "out.txt"
    with open(out, "wb") as sink:
        done = subprocess.run([sys.executable, "-c", _WRITES_WITHOUT_NEWLINE, str(mib)], stdout=sink,
                              stderr=subprocess.PIPE, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    growth = int(done.stderr.split("GROWTH ")[1].split()[0])
    ratio = growth / (mib << 20)
    print(done.stderr.strip(), f"growth / bytes written = {ratio:.3f}")
    assert ratio < 0.1, done.stderr
    data = out.read_bytes()
    assert data.startswith(b"[rank 0] ")
    shown = data.count(b"x") - (1 << 20)  # the first call's 1 MiB, all shown; then this one's
    assert SHOWN_BYTES - (PIECE_BYTES + READ_BYTES) < shown <= SHOWN_BYTES  # the last piece is cut whole
    cut_mib = (mib * (1 << 20) - shown) / 2 ** 20
    notice = f"[rank 0] … {cut_mib:.1f} MiB more of stdout cut: collnb shows at most 4 MiB of each rank's stdout per call"
    assert notice.encode() in data, data[-400:]


def test_a_long_output_is_cut_per_call_and_the_next_call_shows_again(capfd):
    from collnb.ranks.local.output import SHOWN_BYTES

    def writer(rank, world_size, lines):
        for i in range(lines):
            print(f"{rank}:{i:07d}" + "y" * 1000)
        return rank

    many = SHOWN_BYTES // 1000 + 500
    assert collnb.launch(writer, 2, args=(many,)) == [0, 1]
    out = capfd.readouterr().out
    assert out.count("[rank 0] 0:0000000y") == 1 and "[rank 1] 1:0000000y" in out
    assert f"0:{many - 1:07d}" not in out  # the end of rank 0's output was cut ...
    assert "[rank 0] … " in out and "[rank 1] … " in out and "MiB more of stdout cut" in out  # ... and said so
    assert collnb.launch(writer, 1, args=(3,)) == [0]
    again = capfd.readouterr().out
    assert "[rank 0] 0:0000002y" in again and "cut" not in again


def test_pieces_of_a_long_line_stay_behind_one_prefix_and_split_no_character(capfd):
    def writer(rank, world_size):
        if rank == 0:
            for _ in range(3):
                sys.stdout.write("é" * 50_000)  # 100 kB per write, 2-byte characters, no newline
            print("!")
        return rank

    assert collnb.launch(writer, 2) == [0, 1]
    out = capfd.readouterr().out
    line = [ln for ln in out.splitlines() if "é" in ln]
    assert line == ["[rank 0] " + "é" * 150_000 + "!"]


# -- 3: a rank that dies just after it starts --------------------------------------------------

def test_a_rank_that_dies_at_its_start_is_a_rank_error_with_its_last_words(fresh_pool):
    assert collnb.launch(lambda r, w: r, 2) == [0, 1]
    pool = fresh_pool()
    import shutil
    shutil.rmtree(pool.dir)  # a sweep, or the learner: the next ranks cannot open their files
    with pytest.raises(collnb.RankError) as info:
        collnb.launch(lambda r, w: r, 6)
    text = str(info.value)
    first = text.splitlines()[0]
    assert first.startswith("rank 4: Exited: exited with code 1") or first.startswith("rank 5: Exited"), text
    assert "Last output (rank " in text and "No such file or directory" in text and "stack-" in text, text
    assert "rank.py" in text  # where: the rank's own traceback
    assert collnb.launch(lambda r, w: r, 6) == list(range(6))  # the next call starts over


@pytest.mark.parametrize("world_size, phase", [(4, "run"), (3, "new group"), (8, "init")])
def test_a_rank_that_cannot_be_reached_is_a_rank_error_in_every_phase(world_size, phase, monkeypatch, fresh_pool):
    """Rank 1 dies just before the call reaches it (after the idle check): sending it the call, the
    new group or the new default group fails with a broken pipe, which must become the RankError of
    how it died, never a bare BrokenPipeError."""
    assert collnb.launch(lambda r, w: r, 4) == [0, 1, 2, 3]
    pool = fresh_pool()
    monkeypatch.setattr(type(pool), "dead_ranks", lambda self: {})  # the idle check misses it
    victim = pool.ranks[1].proc
    os.kill(victim.pid, signal.SIGKILL)
    victim.join(5)
    with pytest.raises(collnb.RankError) as info:
        collnb.launch(lambda r, w: r, world_size, timeout=60)
    assert str(info.value).startswith("rank 1: Killed: killed by SIGKILL"), (phase, str(info.value))
    monkeypatch.undo()
    assert collnb.launch(lambda r, w: r, 4) == [0, 1, 2, 3]


_FULL_DISK = textwrap.dedent("""
    import os, sys, collnb
    collnb.launch(lambda r, w: r, 2)
    i = 0
    try:
        while True:  # use up the file system's inodes and blocks
            with open(os.path.join(os.environ["TMPDIR"], f"fill{i}"), "w") as fh:
                fh.write("x" * 4096)
            i += 1
    except OSError as exc:
        print("filled:", exc)
    try:
        collnb.launch(lambda r, w: r, 6)
    except collnb.RankError as err:
        print("RANKERROR", str(err).replace(chr(10), " | "))
    except BaseException as exc:
        print("OTHER", type(exc).__name__, exc)
    collnb.shutdown()
""")


@pytest.mark.slow
def test_a_full_disk_when_the_pool_grows_is_a_rank_error_saying_so(tmp_path):
    if os.geteuid() != 0 or not _which("unshare"):
        pytest.skip("needs root and unshare for a private mount of a small tmpfs")
    mnt = tmp_path / "small"
    mnt.mkdir()
    script = tmp_path / "child.py"
    script.write_text(_FULL_DISK)
    cmd = (f"mount -t tmpfs -o size=2m,nr_inodes=64 tmpfs {mnt} && TMPDIR={mnt} exec {sys.executable} {script}")
    done = subprocess.run(["unshare", "-m", "sh", "-c", cmd], capture_output=True, text=True, timeout=300)
    if "mount:" in done.stderr and done.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    out = done.stdout
    assert "RANKERROR" in out, (out, done.stderr[-2000:])
    line = out.split("RANKERROR ", 1)[1]
    assert line.startswith("rank ") and "No space left on device" in line, line


def _which(name):
    import shutil
    return shutil.which(name)


def test_a_rank_that_closes_every_descriptor_is_named_with_the_cause():
    def closes_all(rank, world_size):
        if rank == 1:
            os.closerange(0, 4096)
        dist.barrier()
        return rank

    with pytest.raises(collnb.RankError) as info:
        collnb.launch(closes_all, 2, timeout=60)
    first = str(info.value).splitlines()[0]
    assert first.startswith("rank 1: "), first
    assert "closed its pipes to the launcher" in first and "os.closerange" in first, first
    assert collnb.launch(lambda r, w: r, 2) == [0, 1]


def test_a_crash_with_its_descriptors_open_shows_its_crash_report_and_no_such_hint():
    def aborts(rank, world_size):
        if rank == 1:
            os.abort()
        dist.barrier()

    with pytest.raises(collnb.RankError) as info:
        collnb.launch(aborts, 2, timeout=60)
    text = str(info.value)
    assert text.startswith("rank 1: Killed: killed by SIGABRT\n"), text
    assert "Its crash report (rank 1):\n  Fatal Python error: Aborted" in text, text
    assert "in aborts" in text  # where: the learner's function, from faulthandler's stack


# -- 4: a double-forked daemon -----------------------------------------------------------------

_DAEMON = """
def daemonize(rank, world_size, path):
    import os, time
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                      # the child: a session of its own, then fork again and leave
        os.setsid()
        if os.fork() == 0:            # the grandchild: a daemon, re-parented when its parent exits
            os.close(r)
            os.write(w, str(os.getpid()).encode())
            os.close(w)
            time.sleep(300)
            os._exit(0)
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    grandchild = int(os.read(r, 64))
    os.close(r)
    with open(f"{path}.{rank}", "w") as fh:
        fh.write(str(grandchild))
    return grandchild
"""


def _alive_in_ps(pids):
    """The PIDs of ``pids`` that ``ps`` lists as running (not zombies)."""
    ps = subprocess.run(["ps", "-eo", "pid=,stat="], capture_output=True, text=True, check=True).stdout
    stat = dict(line.split(None, 1) for line in ps.strip().splitlines())
    return [p for p in pids if str(p) in stat and not stat[str(p)].startswith("Z")]


def test_a_double_forked_daemon_ends_with_the_pool(tmp_path):
    scope = {}
    exec(_DAEMON, scope)
    grandchildren = collnb.launch(scope["daemonize"], 2, args=(str(tmp_path / "pid"),))
    assert len(set(grandchildren)) == 2 and _alive_in_ps(grandchildren) == grandchildren
    rank_pids = collnb.ranks.warm_pool().pids()
    for g in grandchildren:  # re-parented to its rank (a child subreaper), not to init
        assert psutil.Process(g).ppid() in rank_pids
    collnb.shutdown()
    deadline = time.monotonic() + 5
    while _alive_in_ps(grandchildren) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _alive_in_ps(grandchildren) == []


def test_a_double_forked_daemon_ends_when_the_kernel_exits(tmp_path):
    code = _DAEMON + textwrap.dedent(f"""
        import collnb
        print("GRANDCHILDREN", *collnb.launch(daemonize, 2, args=({str(tmp_path / 'pid')!r},)), flush=True)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    grandchildren = [int(p) for p in done.stdout.split("GRANDCHILDREN", 1)[1].split()]
    deadline = time.monotonic() + 5
    while _alive_in_ps(grandchildren) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _alive_in_ps(grandchildren) == []


# -- 5: a pool directory is alive while its lock is held ----------------------------------------

def _dead_pid():
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


_HOLDER = "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); " \
          "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(120)"


def test_a_pool_dir_being_made_survives_a_sweep_at_every_step(tmp_path, monkeypatch):
    """Two launches at once (threads or kernels): one's sweep ran between the other's creating its
    lock file and locking it, took the unlocked file for a dead pool's and removed the directory
    (CI: the ranks' ``stack-0.txt`` had no directory). A sweep at each step of make_pool_dir now
    leaves the directory, and the finished pool is held."""
    import fcntl as real_fcntl
    import tempfile
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    sweeps = []
    busy = []

    def sweep_first():
        if busy:
            return
        busy.append(1)
        try:
            processes.sweep_stale_dirs()
            sweeps.append(sorted(p.name for p in tmp_path.iterdir()))
        finally:
            busy.clear()

    class Fcntl:
        LOCK_EX, LOCK_NB, LOCK_UN = real_fcntl.LOCK_EX, real_fcntl.LOCK_NB, real_fcntl.LOCK_UN

        @staticmethod
        def flock(fd, op):
            sweep_first()
            return real_fcntl.flock(fd, op)

    real_rename = os.rename

    def rename(a, b):
        sweep_first()
        return real_rename(a, b)

    monkeypatch.setattr(processes, "fcntl", Fcntl)
    monkeypatch.setattr(processes.os, "rename", rename)
    path = processes.make_pool_dir()
    monkeypatch.undo()
    try:
        assert len(sweeps) == 2 and all(s == [os.path.basename(path)] for s in sweeps), sweeps
        assert os.path.isdir(path) and os.path.exists(os.path.join(path, processes.LOCK_NAME))
        assert processes.pool_dir_is_live(path) == (True, None)
    finally:
        processes.remove_pool_dir(path)
    assert not os.path.exists(path)


def test_the_sweep_trusts_the_lock_not_the_pid_in_the_name(tmp_path):
    root = tmp_path
    old_tmp = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(root)
    import tempfile
    tempfile.tempdir = None
    holder = None
    try:
        # another PID namespace's live pool: its PID means nothing here (dead here), its lock is held
        live_elsewhere = root / f"collnb-{_dead_pid()}-live"
        live_elsewhere.mkdir()
        (live_elsewhere / "store").write_text("x")
        holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(live_elsewhere / processes.LOCK_NAME)],
                                  stdout=subprocess.PIPE, text=True)
        assert holder.stdout.readline().strip() == "held"
        # a dead pool whose PID number is in use here (by this process's parent): no one holds its lock
        dead_elsewhere = root / f"collnb-{os.getppid()}-dead"
        dead_elsewhere.mkdir()
        (dead_elsewhere / processes.LOCK_NAME).write_text("")
        # a directory without a lock file: just being made (young) is kept; an old one of a dead PID goes
        young = root / f"collnb-{_dead_pid()}-young"
        young.mkdir()
        old = root / f"collnb-{_dead_pid()}-old"
        old.mkdir()
        os.utime(old, (time.time() - 3600, time.time() - 3600))
        processes.sweep_stale_dirs()
        assert live_elsewhere.exists() and (live_elsewhere / "store").exists()
        assert not dead_elsewhere.exists()
        assert young.exists() and not old.exists()
        # a pool of this process is alive by its lock: another process's sweep leaves it
        pool_dir = processes.make_pool_dir()
        sweep = subprocess.run([sys.executable, "-c", "from collnb.ranks.local import processes; "
                                                      "processes.sweep_stale_dirs()"],
                               env=dict(os.environ, TMPDIR=str(root)), capture_output=True, text=True, timeout=120)
        assert sweep.returncode == 0, sweep.stderr
        assert os.path.isdir(pool_dir)
        processes.remove_pool_dir(pool_dir)
        assert not os.path.exists(pool_dir)
        holder.kill()
        holder.wait()
        processes.sweep_stale_dirs()  # its owner is gone now: the lock is free
        assert not live_elsewhere.exists()
    finally:
        if holder is not None and holder.poll() is None:
            holder.kill()
            holder.wait()
        if old_tmp is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = old_tmp
        tempfile.tempdir = None


def test_ranks_do_not_keep_their_launchers_lock():
    collnb.launch(lambda r, w: r, 2)
    pool = collnb.ranks.warm_pool()
    lock = os.path.join(pool.dir, processes.LOCK_NAME)
    for pid in pool.pids():
        held = [f.path for f in psutil.Process(pid).open_files()]
        assert lock not in held
    fd = os.open(lock, os.O_RDONLY)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held by this process's pool
    finally:
        os.close(fd)


# -- 6: the smaller ones -----------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, exc, text", [
    (dict(debug="no"), TypeError, "debug must be True or False; got 'no'"),
    (dict(record_calls=1), TypeError, "record_calls must be True or False; got 1"),
    (dict(show_backend_log=None), TypeError, "show_backend_log must be True or False; got None"),
    (dict(args="abc"), TypeError, "args must be a tuple (or list) of the extra arguments, e.g. args=('abc',) for one; "
                                  "got the str 'abc'"),
    (dict(args=5), TypeError, "args must be a tuple (or list)"),
    (dict(kwargs=[("a", 1)]), TypeError, "kwargs must be a dict of keyword arguments (str keys) or None"),
])
def test_launch_refuses_arguments_of_the_wrong_type(kwargs, exc, text):
    pool = collnb.ranks.warm_pool()
    before = pool.pids() if pool and not pool.broken else []
    with pytest.raises(exc) as info:
        collnb.launch(lambda r, w, *a, **k: r, 2, **kwargs)
    assert str(info.value).startswith(text), str(info.value)
    after = collnb.ranks.warm_pool()
    assert (after.pids() if after and not after.broken else []) == before


_TUTORIAL = textwrap.dedent('''
    import os
    import torch.distributed as dist

    def run(rank, size):
        """ Distributed function to be implemented later. """
        pass

    def init_process(rank, size, fn, backend='gloo'):
        """ Initialize the distributed environment. """
        os.environ['MASTER_ADDR'] = '127.0.0.1'
        os.environ['MASTER_PORT'] = '29500'
        dist.init_process_group(backend, rank=rank, world_size=size)
        fn(rank, size)
''')


def test_the_pytorch_tutorials_init_process_says_what_to_call():
    scope = {"__name__": "__main__"}
    exec(compile(_TUTORIAL, "<tutorial cell>", "exec"), scope)
    with pytest.raises(collnb.RankError) as info:
        collnb.launch(scope["init_process"], 2, args=(scope["run"],))
    text = str(info.value)
    assert "trying to initialize the default process group twice" in text
    assert "collnb has already initialised the default process group" in text
    assert "collnb.launch(run, 2)" in text
    assert collnb.launch(scope["run"], 2) == [None, None]


def test_a_launch_inside_a_rank_is_refused_and_leaves_no_directory():
    def nested(rank, world_size):
        try:
            collnb.launch(lambda r, w: r, 2)
        except RuntimeError as exc:
            return str(exc)
        return "launched"

    before = set(pool_dirs())
    out = collnb.launch(nested, 2)
    assert all(o.startswith("collnb.launch was called inside rank ") for o in out), out
    assert "ranks cannot start ranks of their own" in out[0]
    collnb.shutdown()
    assert set(pool_dirs()) <= before  # this process's pool folders only: other sessions share the folder
    assert live_children() == []
