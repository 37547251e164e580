"""Builds the static wheel index from wheelhouse/<variant>/*.whl.

<out>/index.html                      the variants, with their pip lines
<out>/<variant>/index.html            find-links page (pip -f), #sha256= on every link
<out>/<variant>/<wheel>               the wheels
<out>/<variant>/<wheel>.metadata      PEP 658 core metadata
<out>/<variant>/simple/visdet-ops/    PEP 503 page (pip --extra-index-url <out>/<variant>/simple)
<out>/torch-<X.Y.Z>+<flavour>/        aliases by exact torch release (like PyG), same wheels
"""

from __future__ import annotations

import argparse
import hashlib
import html
import shutil
import sys
import zipfile
from pathlib import Path

from packaging.utils import parse_wheel_filename

from . import matrix as variant_matrix
from . import wheel_check

PROJECT = "visdet-ops"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _metadata(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        return zf.read(name)


def _page(title: str, links: list[str]) -> str:
    body = "\n".join(f"    {link}<br/>" for link in links)
    return (
        '<!DOCTYPE html>\n<html>\n  <head><meta name="pypi:repository-version" content="1.0">'
        f"<title>{html.escape(title)}</title></head>\n  <body>\n    <h1>{html.escape(title)}</h1>\n{body}\n"
        "  </body>\n</html>\n"
    )


def _wheel_link(href: str, wheel: Path, digest: str, meta_digest: str) -> str:
    return (
        f'<a href="{html.escape(href)}#sha256={digest}" data-requires-python="&gt;=3.10" '
        f'data-dist-info-metadata="sha256={meta_digest}" data-core-metadata="sha256={meta_digest}">'
        f"{html.escape(wheel.name)}</a>"
    )


def build(wheelhouse: Path, out: Path, base_url: str | None = None) -> list[str]:
    """Writes the index; returns the variants it contains."""
    matrix = variant_matrix.load()
    out.mkdir(parents=True, exist_ok=True)
    variants = []
    for vdir in sorted(p for p in wheelhouse.iterdir() if p.is_dir()):
        wheels = sorted(vdir.glob("*.whl"))
        if not wheels:
            continue
        variant = vdir.name
        dest = out / variant
        dest.mkdir(parents=True, exist_ok=True)
        links, simple_links = [], []
        aliases: set[str] = set()
        for wheel in wheels:
            _, version, _, _ = parse_wheel_filename(wheel.name)
            if version.local != variant:
                raise ValueError(f"{wheel}: local version +{version.local} does not match its folder {variant}")
            shutil.copy2(wheel, dest / wheel.name)
            meta = _metadata(wheel)
            (dest / f"{wheel.name}.metadata").write_bytes(meta)
            digest, meta_digest = sha256(wheel), hashlib.sha256(meta).hexdigest()
            links.append(_wheel_link(wheel.name, wheel, digest, meta_digest))
            simple_links.append(_wheel_link(f"../../../{wheel.name}", wheel, digest, meta_digest))
            info = wheel_check.build_info(wheel)
            flavour = f"cu{info['TORCH_CUDA_VERSION'].replace('.', '')}" if info["WITH_CUDA"] else "cpu"
            built = info["TORCH_VERSION"].split("+")[0]
            # One wheel serves every patch release of its torch minor.
            patches = {str(t) for t in matrix.flavour(flavour).patches_of(built)} | {built}
            aliases |= {f"torch-{p}+{flavour}" for p in patches}
        (dest / "index.html").write_text(_page(f"visdet-ops wheels for {variant}", links))
        simple = dest / "simple"
        (simple / PROJECT).mkdir(parents=True, exist_ok=True)
        (simple / "index.html").write_text(_page("Simple index", [f'<a href="{PROJECT}/">{PROJECT}</a>']))
        (simple / PROJECT / "index.html").write_text(_page(f"Links for {PROJECT}", simple_links))
        for alias in sorted(aliases):
            adir = out / alias
            adir.mkdir(parents=True, exist_ok=True)
            alias_links = [link.replace('href="', f'href="../{variant}/', 1) for link in links]
            (adir / "index.html").write_text(_page(f"visdet-ops wheels for {alias} (= {variant})", alias_links))
        variants.append(variant)
    prefix = (base_url.rstrip("/") + "/") if base_url else ""
    top = [
        f'<a href="{v}/">{v}</a>: <code>pip install visdet-ops -f {html.escape(prefix)}{v}/</code>' for v in variants
    ]
    (out / "index.html").write_text(_page("visdet-ops wheel index", top))
    return variants


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheelhouse", type=Path, default=Path("wheelhouse"))
    parser.add_argument("--out", type=Path, default=Path("index"))
    parser.add_argument("--base-url", default=None, help="URL the index is served at (for the pip lines)")
    args = parser.parse_args(argv)
    if not args.wheelhouse.is_dir():
        print(f"no {args.wheelhouse}/ folder: build a wheel first (nox -s build-cpu)", file=sys.stderr)
        return 1
    variants = build(args.wheelhouse, args.out, args.base_url)
    if not variants:
        print(f"no wheels under {args.wheelhouse}/<variant>/", file=sys.stderr)
        return 1
    print(f"index at {args.out}/: {', '.join(variants)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
