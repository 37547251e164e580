"""ci/gpu_check.py's sharded suite (run on the GPU machine; its parts run here): the test files split into one shard
per GPU, each shard its own pytest on its own GPU with one-thread workers, the counts summed from the shards' junit."""

from __future__ import annotations

import os
from pathlib import Path

from ci import gpu_check

ROOT = Path(__file__).resolve().parent.parent


def test_shards_hold_every_file_once_and_balance_by_size(tmp_path):
    sizes = [300, 250, 120, 100, 90, 40, 30, 5]
    files = []
    for n, lines in enumerate(sizes):
        f = tmp_path / f"test_{n}.py"
        f.write_text("x = 1\n" * lines)
        files.append(f)
    groups = gpu_check.shard_files(files, 3)
    assert len(groups) == 3 and sorted(f for g in groups for f in g) == sorted(files)
    loads = [sum(len(f.read_text().splitlines()) for f in g) for g in groups]
    assert max(loads) - min(loads) <= max(sizes[1:]), loads
    assert gpu_check.shard_files(files[:2], 4) == [[files[0]], [files[1]]]  # never an empty shard


def test_suite_files_are_the_whole_suite_less_the_source_tree_tests():
    found = {str(f) for f in gpu_check.suite_files(ROOT)}
    assert "tests/ops/test_roi_align.py" in found and "tests/test_memory.py" in found
    assert "tests/test_cuda_sources.py" not in found
    assert all(f.startswith("tests/") and Path(f).name.startswith("test_") for f in found)


def test_sharded_run_gives_each_shard_its_gpu_and_one_thread(tmp_path):
    """Two shards of a small suite, each a real pytest: every test sees its shard's GPU index and one OMP thread;
    the report sums the shards; a failing shard makes rc non-zero."""
    tree = tmp_path / "tree"
    (tree / "tests" / "ops").mkdir(parents=True)
    check = (
        "import os\n"
        "def test_env():\n"
        "    assert os.environ['OMP_NUM_THREADS'] == '1' and os.environ['MKL_NUM_THREADS'] == '1'\n"
        "    assert os.environ['CUDA_VISIBLE_DEVICES'] in ('5', '7')\n"
    )
    (tree / "tests" / "test_a.py").write_text(check + "def test_more():\n    pass\n")
    (tree / "tests" / "ops" / "test_b.py").write_text(check)
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "5,7", "PYTHONPATH": str(ROOT)}
    report = gpu_check.run_sharded_suite(tree, out, env, gpus=2, workers=1, extra=[], timeout=120)
    assert report["rc"] == 0, [p.read_text() for p in out.glob("pytest-*.log")]
    assert (report["shards"], report["tests"], report["failures"]) == (2, 3, 0)
    (tree / "tests" / "ops" / "test_b.py").write_text("def test_fails():\n    assert False\n")
    report = gpu_check.run_sharded_suite(tree, out, env, gpus=2, workers=1, extra=[], timeout=120)
    assert report["rc"] != 0 and report["failures"] == 1 and report["tests"] == 3
    # More shards asked for than GPUs the caller left visible: one shard per visible GPU, none elsewhere.
    (tree / "tests" / "ops" / "test_b.py").write_text(check)
    report = gpu_check.run_sharded_suite(tree, out, env, gpus=4, workers=1, extra=[], timeout=120)
    assert (report["rc"], report["shards"], report["tests"]) == (0, 2, 3)
