"""visdet_ops.mmcv_compat.install() where mmcv-lite and mmengine are installed (test-time only; skipped, saying
why, elsewhere), in a fresh process each: mmcv.ops and its submodules resolve to visdet_ops, mmengine's MODELS gets
mmcv's registry names, missing names raise naming them, a full mmcv is refused; and mmcv-lite's own source of the
composite modules (mmcv/ops/merge_cells.py, saconv.py, point_sample.py, run over mmcv.cnn) against ours."""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _missing() -> str | None:
    for name in ("mmengine", "mmcv"):
        if importlib.util.find_spec(name) is None:
            return f"{name} is not installed (pip install mmcv-lite mmengine to run the compat tests)"
    return None


pytestmark = pytest.mark.skipif(_missing() is not None, reason=_missing() or "")


def _run(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, timeout=300
    )


def _ok(code: str) -> str:
    done = _run(code)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_mmcv_ops_resolves_to_visdet_ops():
    _ok("""
        import sys
        import visdet_ops, visdet_ops.mmcv_compat as compat
        compat.install(); compat.install()  # idempotent
        import mmcv.ops
        from mmcv.ops import batched_nms, point_sample, DeformConv2dPack, SAConv2d
        from mmcv.ops.nms import batched_nms as b2
        from mmcv.ops.merge_cells import GlobalPoolingCell, SumCell, ConcatCell
        from mmcv.ops.point_sample import SimpleRoIAlign
        from mmcv.ops.saconv import SAConv2d as S2
        assert compat.installed() and batched_nms is b2 is visdet_ops.batched_nms and S2 is visdet_ops.SAConv2d
        assert mmcv.ops.nms is visdet_ops.nms and sys.modules["mmcv.ops.nms"] is sys.modules["visdet_ops.nms"]
        assert mmcv.ops.deform_conv is sys.modules["visdet_ops.deform_conv"]
        assert not hasattr(mmcv.ops, "box_iou_rotated")
        try:
            from mmcv.ops import box_iou_rotated
        except ImportError as e:
            assert "box_iou_rotated" in str(e), e
        else:
            raise AssertionError("no ImportError")
        try:
            import mmcv.ops.box_iou_rotated
        except ImportError as e:
            assert "mmcv.ops.box_iou_rotated" in str(e) and "no module box_iou_rotated" in str(e), e
        else:
            raise AssertionError("no ImportError")
        from mmengine.registry import MODELS
        for name, cls in compat.MODELS_NAMES.items():
            assert MODELS.get(name) is cls, name
        conv = MODELS.build(dict(type="DCN", in_channels=4, out_channels=4, kernel_size=3, padding=1))
        assert isinstance(conv, visdet_ops.DeformConv2dPack)
        bn = MODELS.build(dict(type="MMSyncBN", num_features=4))
        import torch
        x = torch.randn(2, 4, 3, 3)
        torch.testing.assert_close(bn(x), torch.nn.BatchNorm2d(4)(x))  # one process: a plain batch norm
        assert list(bn.state_dict()) == ["weight", "bias", "running_mean", "running_var", "num_batches_tracked"]
    """)


def _registered(call: ast.Call, owner: str | None) -> str | None:
    """The registry name of a `MODELS.register_module(...)` call (its name= or first argument, else the class)."""
    name = next((k.value for k in call.keywords if k.arg == "name"), call.args[0] if call.args else None)
    return name.value if isinstance(name, ast.Constant) else owner


def test_registry_names_are_mmcvs():
    """MODELS_NAMES is every `MODELS.register_module` of mmcv's mmcv/ops (mmcv-lite ships the same Python files)
    but those visdet-ops lacks, which its docstring names."""
    import mmcv

    from visdet_ops import mmcv_compat

    names = set()
    for path in (Path(mmcv.__file__).parent / "ops").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            decorators = node.decorator_list if isinstance(node, (ast.ClassDef, ast.FunctionDef)) else []
            for d in decorators:
                if isinstance(d, ast.Call) and getattr(d.func, "attr", None) == "register_module":
                    names.add(_registered(d, node.name if isinstance(node, ast.ClassDef) else None))
    names.discard(None)
    assert set(mmcv_compat.MODELS_NAMES) == names - {
        n for n in names if n in mmcv_compat._models_names.__doc__ or n.startswith(("Sparse", "SubM"))
    }, sorted(names)


def test_refuses_a_full_mmcv(tmp_path):
    (tmp_path / "mmcv").mkdir()
    (tmp_path / "mmcv" / "__init__.py").write_text("__version__ = '2.1.0'\n")
    (tmp_path / "mmcv" / "_ext.py").write_text("")
    done = _run(f"""
        import sys; sys.path.insert(0, {str(tmp_path)!r})
        import visdet_ops.mmcv_compat as compat
        compat.install()
    """)
    assert done.returncode != 0 and "has its own compiled ops (mmcv._ext)" in done.stderr, done.stderr[-2000:]


def test_mmcvs_own_composite_modules_agree_with_ours():
    """mmcv-lite's mmcv/ops/merge_cells.py, saconv.py and point_sample.py, loaded from its files over mmcv.cnn (and,
    for saconv, our deform_conv2d as mmcv.ops.deform_conv): same state-dict keys, and the same outputs with the same
    weights."""
    _ok("""
        import importlib.util, pathlib, torch, mmcv
        import visdet_ops, visdet_ops.mmcv_compat as compat
        compat.install()
        from mmengine.registry import MODELS
        MODELS._module_dict.pop("SAC")  # mmcv's saconv.py registers it again
        def load(name):
            path = pathlib.Path(mmcv.__file__).parent / "ops" / f"{name}.py"
            spec = importlib.util.spec_from_file_location(f"mmcv.ops._mmcv_{name}", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
        cells, sac, ps = load("merge_cells"), load("saconv"), load("point_sample")
        torch.manual_seed(0)
        gn = dict(out_norm_cfg=dict(type="GN", num_groups=2), with_input1_conv=True)
        bn = dict(out_norm_cfg=dict(type="BN"))
        for name, kw in (("SumCell", bn), ("ConcatCell", {}), ("GlobalPoolingCell", gn)):
            theirs, ours = getattr(cells, name)(4, 4, **kw).double(), getattr(visdet_ops, name)(4, 4, **kw).double()
            assert list(theirs.state_dict()) == list(ours.state_dict()), name
            ours.load_state_dict(theirs.state_dict())
            x1, x2 = torch.randn(2, 4, 6, 6, dtype=torch.float64), torch.randn(2, 4, 12, 10, dtype=torch.float64)
            torch.testing.assert_close(ours(x1, x2), theirs(x1, x2))
        for deform in (False, True):
            theirs = sac.SAConv2d(4, 6, 3, padding=1, use_deform=deform).double()
            ours = visdet_ops.SAConv2d(4, 6, 3, padding=1, use_deform=deform).double()
            assert list(theirs.state_dict()) == list(ours.state_dict())
            with torch.no_grad():
                for p in theirs.parameters():
                    p.normal_(0, 0.3)
            ours.load_state_dict(theirs.state_dict())
            x = torch.randn(2, 4, 9, 8, dtype=torch.float64)
            torch.testing.assert_close(ours(x), theirs(x))
        x = torch.randn(2, 3, 10, 12, dtype=torch.float64)
        rois = torch.tensor([[0, 1, 1, 30, 20], [0, 3, 4, 9, 9], [1, 0, 0, 40, 40.]], dtype=torch.float64)
        for aligned in (True, False):
            torch.testing.assert_close(
                visdet_ops.SimpleRoIAlign(5, 0.25, aligned)(x, rois), ps.SimpleRoIAlign(5, 0.25, aligned)(x, rois))
    """)


def test_build_conv_layer_finds_the_dcn_names():
    """mmcv.cnn's build_conv_layer (what MMDetection's ResNet, DetectoRS and the heads call with a `dcn=` cfg)
    finds DCN / DCNv2 / SAC through mmengine's MODELS after install(), with and without a default scope, and the
    layers take an in-place ReLU after them at batch 1 and 2, forward and backward."""
    _ok("""
        import torch
        import visdet_ops, visdet_ops.mmcv_compat as compat
        compat.install()
        from mmcv.cnn import build_conv_layer
        from mmengine.registry import DefaultScope
        want = {"DCN": visdet_ops.DeformConv2dPack, "DCNv2": visdet_ops.ModulatedDeformConv2dPack,
                "SAC": visdet_ops.SAConv2d}
        for scope in (None, "mmengine"):
            if scope is not None:
                DefaultScope.get_instance(f"test-{scope}", scope_name=scope)
            for name, cls in want.items():
                cfg = dict(type=name) if name == "SAC" else dict(type=name, deform_groups=1)
                conv = build_conv_layer(cfg, 4, 4, kernel_size=3, stride=1, padding=1, bias=False)
                assert type(conv) is cls, (scope, name, type(conv))
                block = torch.nn.Sequential(conv, torch.nn.BatchNorm2d(4), torch.nn.ReLU(inplace=True))
                for batch in (1, 2):
                    x = torch.randn(batch, 4, 7, 6, requires_grad=True)
                    y = block(x)
                    y.sum().backward()
                    assert x.grad is not None and x.grad.shape == x.shape
    """)


@pytest.mark.skipif(importlib.util.find_spec("mmdet") is None, reason="mmdet is not installed (pip install mmdet)")
def test_mmdet_resnet50_with_dcnv2_stages():
    """MMDetection's ResNet-50 with `dcn=dict(type='DCNv2', deform_groups=1, fallback_on_stride=False)` on stages
    2-4 (its configs/dcnv2 backbone), built through mmdet's registry: conv2 of those stages is ours, and the
    backbone, whose ReLUs are in-place, runs forward and backward at batch 1 and 2, and in eval at batch 1."""
    _ok("""
        import torch
        import visdet_ops, visdet_ops.mmcv_compat as compat
        compat.install()
        from mmdet.registry import MODELS
        from mmdet.utils import register_all_modules
        register_all_modules()
        backbone = MODELS.build(dict(
            type="ResNet", depth=50, num_stages=4, out_indices=(0, 1, 2, 3), frozen_stages=1,
            norm_cfg=dict(type="BN", requires_grad=True), norm_eval=True, style="pytorch",
            dcn=dict(type="DCNv2", deform_groups=1, fallback_on_stride=False),
            stage_with_dcn=(False, True, True, True)))
        backbone.init_weights()
        assert type(backbone.layer1[0].conv2) is torch.nn.Conv2d
        for layer in (backbone.layer2, backbone.layer3, backbone.layer4):
            assert all(type(block.conv2) is visdet_ops.ModulatedDeformConv2dPack for block in layer)
        assert backbone.layer3[0].relu.inplace
        backbone.train()
        for batch in (1, 2):
            backbone.zero_grad()
            x = torch.randn(batch, 3, 64, 64)
            outs = backbone(x)
            assert [tuple(o.shape) for o in outs] == [(batch, 256 * 2**i, 16 // 2**i, 16 // 2**i) for i in range(4)]
            sum(o.sum() for o in outs).backward()
            grad = backbone.layer4[0].conv2.conv_offset.weight.grad
            assert grad is not None and torch.isfinite(grad).all()
        backbone.eval()
        with torch.no_grad():
            assert backbone(torch.randn(1, 3, 64, 64))[3].shape == (1, 2048, 2, 2)
    """)
