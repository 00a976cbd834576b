"""Helpers the benchmark scripts share: threads, timing, the machine, real pairs, results.

Every benchmark writes its latest figures to ``benchmarks/results/<name>.json`` (see
:func:`write_results` for the schema); ``benchmarks/render_results.py`` renders those files
into ``benchmarks/RESULTS.md``.  The scripts import this module as ``_common`` (they run
as ``python benchmarks/<script>.py``, which puts ``benchmarks/`` on ``sys.path``).
"""

import datetime
import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS_DIR = HERE / "results"
PAIRS_ROOT = HERE / "pairs" / "cache"
#: Held-aside pairs kept blind until a method's final measurement: a script that runs on
#: every cached pair skips them; only a run that names one (``--pairs NAME``) loads it.
BLIND = ("heldout_d_",)
#: A box counts as loaded when its 1-minute load average exceeds this share of its cores.
LOADED_SHARE = 0.75


# -- a measured fresh process ---------------------------------------------------------------

# Run as ``python -c PEAK -c CODE ARGS...``: executes CODE with ARGS as its argv and reports
# the process's peak resident memory (VmHWM) at exit on stderr.
PEAK = """
import atexit, sys
def _peak():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM"):
                sys.stderr.write(f"PEAK_KB {line.split()[1]}\\n")
atexit.register(_peak)
sys.argv.pop(1)
code = sys.argv.pop(1)
sys.argv[0] = "-c"
exec(compile(code, "<bench>", "exec"), {"__name__": "__main__"})
"""


def timed(code, *args, cwd=None, env=None):
    """Run ``code`` in a fresh process: (seconds of work after its imports, peak MiB).

    ``code`` writes ``WORK_S <seconds>`` to stderr once its timed work is done; the last
    such line counts.  A failed run stops the benchmark with its stderr.
    """
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-c", PEAK, "-c", code, *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        env=env,
    )
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(map(str, args))}\n{proc.stderr}")

    def last(tag):
        values = [line.split()[1] for line in proc.stderr.splitlines() if line.startswith(tag)]
        return float(values[-1])

    return last("WORK_S"), last("PEAK_KB") / 1024


# -- command line ---------------------------------------------------------------------------


def add_threads_argument(parser, default=None):
    """``--threads N``: CPU threads for torch and BLAS (see :func:`limit_threads`)."""
    parser.add_argument(
        "--threads",
        type=int,
        default=default,
        help="CPU threads for torch and BLAS (default: "
        + ("their own defaults" if default is None else str(default))
        + "); 1 gives steadier figures on a machine shared with other jobs",
    )


def add_json_arguments(parser, name):
    """``--json PATH`` (default ``benchmarks/results/<name>.json``) and ``--no-json``."""
    parser.add_argument(
        "--json",
        default=str(RESULTS_DIR / f"{name}.json"),
        metavar="PATH",
        help=f"write the figures here (default: benchmarks/results/{name}.json, which "
        "render_results.py turns into RESULTS.md)",
    )
    parser.add_argument(
        "--no-json", action="store_true", help="print only (for smoke runs: keeps the results)"
    )


def limit_threads(threads):
    """Limit torch's and the BLAS libraries' threads to ``threads`` (None: leave them).

    The limits hold for the rest of the process; the threadpoolctl limiter is returned.
    """
    if threads is None:
        return None
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(threads)
    return threadpool_limits(threads)


# -- timing ---------------------------------------------------------------------------------


def synchronize(device=None):
    """Wait for the device's queued work (CUDA), so a timer measures it."""
    if device is not None and getattr(device, "type", str(device)).startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)


def time_interleaved(candidates, repeats, *, device=None, warmup=True):
    """Seconds of each candidate over ``repeats`` rounds, run interleaved.

    ``candidates`` maps a name to a callable.  Every round runs each candidate once, so
    load from other jobs hits them alike; a warm-up round first pays the allocator, thread
    pools and CUDA context.  Returns ``{name: [seconds, ...]}``.
    """
    if warmup:
        for run in candidates.values():
            run()
            synchronize(device)
    times = {name: [] for name in candidates}
    for _ in range(repeats):
        for name, run in candidates.items():
            start = time.perf_counter()
            run()
            synchronize(device)
            times[name].append(time.perf_counter() - start)
    return times


def best_time(function, repeats, *, device=None):
    """(best seconds over ``repeats`` calls, the last call's result)."""
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        synchronize(device)
        best = min(best, time.perf_counter() - start)
    return best, result


# -- the machine ----------------------------------------------------------------------------


def _cpu_model():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_state():
    """``"quiet"`` or ``"loaded"`` (1-minute load average against the cores), with the load."""
    cores = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except OSError:
        return "load unknown"
    state = "loaded" if load > LOADED_SHARE * cores else "quiet"
    return f"{state} (load average {load:.1f})"


def describe_machine(device=None):
    """One line: CPU model and cores, torch version, the GPU if one is used, and the load."""
    import torch

    parts = [f"{_cpu_model()}, {os.cpu_count()} cores", f"torch {torch.__version__}"]
    on_gpu = str(device).startswith("cuda") or str(device) == "auto"
    if device is not None and on_gpu and torch.cuda.is_available():
        parts.append(torch.cuda.get_device_name(torch.device(device)))
    else:
        parts.append("no GPU used")
    parts.append(machine_state())
    return ", ".join(parts)


# -- real pairs -----------------------------------------------------------------------------


#: The MNIST pairs of the shipped features (``sklearn_compat.datasets``), "new -> old".
MNIST_PAIRS = [("cnn_s0", "cnn_s1"), ("cnn_s0", "mlp_s0")]


def find_upwards(relative):
    """``relative`` under the first folder above ``benchmarks/`` that has it, else None."""
    for folder in HERE.parents:
        candidate = folder / relative
        if candidate.exists():
            return candidate
    return None


def unit(A):
    """Rows scaled to unit length, float32."""
    import numpy as np

    A = np.asarray(A, dtype=np.float32)
    return A / np.maximum(np.linalg.norm(A, axis=1, keepdims=True), 1e-12)


def load_mnist(raw=False):
    """The two MNIST pairs of ``load_mnist_features()``, L2-normalised rows (``raw``: as stored).

    ``[(name, pair)]``.
    """
    from sklearn_compat.datasets import load_mnist_features

    d = load_mnist_features()
    train, test = d["train_idx"], d["test_idx"]
    out = []
    for new, old in MNIST_PAIRS:
        X, Y = (d[new], d[old]) if raw else (unit(d[new]), unit(d[old]))
        pair = {"X_train": X[train], "Y_train": Y[train], "X_test": X[test], "Y_test": Y[test]}
        pair["labels_train"], pair["labels_test"] = d["labels"][train], d["labels"][test]
        out.append((f"mnist {new}->{old}", pair))
    return out


def load_npz_pair(path):
    """One cached real pair (``benchmarks/pairs/build_pairs.py``) split into train and test.

    A dict with X_train, Y_train, X_test, Y_test, meta, and where present
    labels_train/labels_test (class labels) and gallery/gold (the word pair).
    """
    import numpy as np

    with np.load(path, allow_pickle=False) as z:
        d = {k: z[k] for k in z.files}
    train = d["split"]
    pair = {
        "X_train": d["X"][train],
        "Y_train": d["Y"][train],
        "X_test": d["X"][~train],
        "Y_test": d["Y"][~train],
        "meta": json.loads(str(d["meta"])),
    }
    if "labels" in d:
        pair["labels_train"], pair["labels_test"] = d["labels"][train], d["labels"][~train]
    if "gallery" in d:
        pair["gallery"] = d["gallery"]
        pair["gold"] = d["gold_rows"][~train]
    return pair


def cached_pairs(pairs_root=None):
    """The ``.npz`` files of every cached pair under ``pairs_root`` but the :data:`BLIND`
    ones, sorted."""
    root = Path(pairs_root) if pairs_root else PAIRS_ROOT
    found = sorted(root.glob("*.npz")) if root.exists() else []
    return [p for p in found if not p.stem.startswith(BLIND)]


def load_all_pairs(pairs_root=None, mnist=True):
    """``{"design pairs": [(name, pair)], "held-aside pairs": [...]}``: the normalised MNIST
    pairs and every cached pair under ``pairs_root`` (``heldout_*`` apart)."""
    found = cached_pairs(pairs_root)
    if not found:
        root = pairs_root or PAIRS_ROOT
        print(f"(no text pairs under {root}; build them with benchmarks/pairs/build_pairs.py)")
    design = load_mnist() if mnist else []
    design += [(p.stem, load_npz_pair(p)) for p in found if not p.stem.startswith("heldout_")]
    held = [(p.stem, load_npz_pair(p)) for p in found if p.stem.startswith("heldout_")]
    return {"design pairs": design, "held-aside pairs": held}


def load_pairs(pairs_root=None, mnist=True):
    """[(name, pair)]: the raw MNIST pairs and every pair under ``pairs_root``, in one list."""
    found = cached_pairs(pairs_root)
    return (load_mnist(raw=True) if mnist else []) + [(p.stem, load_npz_pair(p)) for p in found]


# -- results --------------------------------------------------------------------------------


def table(title, columns, rows):
    """One table of a results file: ``{"title", "columns", "rows"}``, cells as given."""
    rows = [list(row) for row in rows]
    for row in rows:
        if len(row) != len(columns):
            raise ValueError(f"table {title!r}: row {row!r} has not {len(columns)} cells")
    return {"title": title, "columns": list(columns), "rows": rows}


def command_line(argv=None):
    """The command that produced the results, as a user would type it."""
    argv = sys.argv if argv is None else argv
    script = Path(argv[0])
    try:
        script = script.resolve().relative_to(HERE.parent)
    except ValueError:
        pass
    return " ".join(["python", shlex.quote(script.as_posix()), *map(shlex.quote, argv[1:])])


def results(name, title, tables, *, notes="", command=None, machine=None, date=None):
    """The results record of one benchmark run (the schema :func:`write_results` writes)."""
    return {
        "benchmark": name,
        "title": title,
        "command": command if command is not None else command_line(),
        "machine": machine if machine is not None else describe_machine(),
        "date": date or datetime.date.today().isoformat(),
        "notes": notes,
        "tables": list(tables),
    }


def write_results(args, name, title, tables, *, notes="", device=None):
    """Write ``benchmarks/results/<name>.json`` (or ``args.json``) unless ``args.no_json``.

    The file holds one object::

        {"benchmark": name, "title": str, "command": the command line, "machine": str,
         "date": ISO date, "notes": str,
         "tables": [{"title": str, "columns": [str], "rows": [[cell, ...]]}]}

    Regenerate the page afterwards with ``python benchmarks/render_results.py``.
    """
    if getattr(args, "no_json", False) or not getattr(args, "json", None):
        return None
    path = Path(args.json)
    # A script that writes several files (held-aside pairs, a second measurement) names
    # each record after its file, so the page keeps one section per file.
    record_name = path.stem if path.parent.resolve() == RESULTS_DIR.resolve() else name
    record = results(record_name, title, tables, notes=notes, machine=describe_machine(device))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1, default=_plain) + "\n", encoding="utf-8")
    print(f"wrote {path} (now run: python benchmarks/render_results.py)")
    return path


def _plain(value):
    # numpy scalars and arrays become builtins; anything else its text.
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)
