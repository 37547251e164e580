"""Builds the static wheel index: find-links pages and PEP 503 simple pages per variant.

  python -m ci.index [--wheelhouse wheelhouse] [--out index] [--base-url URL]
                     [--previous URL_OR_DIR] [--wheel-url URL --assets-out DIR]

The index is generated from a manifest (<out>/manifest.json: one entry per wheel with its URL, sha256, core
metadata sha256, Requires-Python and torch aliases). A release merges the new wheels into the manifest of the
index already published (--previous), so that every earlier version stays listed and installable.

Where the wheels live:
- default: inside the index, beside their pages (<out>/<variant>/<wheel>, <wheel>.metadata): a self-contained
  folder, what `nox -s index` makes from wheelhouse/ for a local or mirrored index;
- --wheel-url URL --assets-out DIR: the wheels (and their .metadata files, PEP 658) are copied to DIR for upload
  to URL (a GitHub release's download URL); the pages link there, so the published site holds only pages.

A variant's wheels for x86_64 and aarch64 share its folder and pages (pip picks by platform tag); each manifest entry
names its platform.

Layout of <out>:
  index.html                            the variants, with their pip lines and platforms
  manifest.json                         every wheel ever published
  <variant>/index.html                  find-links page (pip -f <out>/<variant>/), #sha256= on every link
  <variant>/simple/visdet-ops/          PEP 503 page (pip --index-url <out>/<variant>/simple)
  torch-<X.Y.Z>+<flavour>/index.html    aliases by exact torch release (like PyG), same wheels

A stable-ABI wheel (variant stable<floor><cpu|cuX>, e.g. stable211cu13/) gets its variant folder (find-links and
simple pages) like any other, but no torch-<X.Y.Z>+<flavour> alias: it serves every torch >= the floor, and an alias
page holding it beside a per-minor wheel would leave pip to choose between two local labels of one version.
"""

from __future__ import annotations

import argparse
import email.parser
import hashlib
import html
import json
import posixpath
import shutil
import sys
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

from packaging.utils import parse_wheel_filename

from . import matrix as variant_matrix
from . import wheel_check

PROJECT = "visdet-ops"
MANIFEST = "manifest.json"
MANIFEST_SCHEMA = 1


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _metadata(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        return zf.read(name)


def _aliases(wheel: Path, matrix) -> list[str]:
    """torch-<X.Y.Z>+<flavour> for every patch release of the torch minor the wheel was built against; none for a
    stable-ABI wheel (it is not tied to one torch minor)."""
    info = wheel_check.build_info(wheel)
    if info.get("STABLE_ABI"):
        return []
    flavour = variant_matrix.rules.flavour_for(info["TORCH_CUDA_VERSION"] if info["WITH_CUDA"] else None)
    built = str(variant_matrix.rules.parse_release(info["TORCH_VERSION"])).split("+")[0]
    patches = {built}
    try:
        patches |= {str(t) for t in matrix.flavour(flavour).patches_of(built)}
    except KeyError:
        pass  # a flavour the matrix no longer lists keeps its own release
    return sorted(f"torch-{p}+{flavour}" for p in patches)


def describe_wheel(wheel: Path, variant: str, url: str, matrix) -> dict:
    """The manifest entry of one wheel; checks that its local label names its variant."""
    _, version, _, tags = parse_wheel_filename(wheel.name)
    if version.local != variant:
        raise ValueError(f"{wheel}: local version +{version.local} does not match its folder {variant}")
    rules = variant_matrix.rules
    if not (rules.is_variant(variant) or rules.is_stable_variant(variant)):
        raise ValueError(f"{wheel}: {variant} is not a variant name (pt213cpu, stable211cu13)")
    stable = bool(wheel_check.build_info(wheel).get("STABLE_ABI"))
    if stable != rules.is_stable_variant(variant):
        kind = "a stable-ABI" if stable else "a per-minor"
        raise ValueError(f"{wheel}: {kind} build (STABLE_ABI in its build info) in the folder {variant}")
    meta = _metadata(wheel)
    requires_python = email.parser.BytesParser().parsebytes(meta, headersonly=True).get("Requires-Python")
    machines = wheel_check.tag_machines(tags)
    if len(machines) != 1:
        raise ValueError(f"{wheel}: its platform tags name {sorted(machines) or 'no machine'}, expected one of "
                         f"{', '.join(rules.PLATFORMS)}")  # fmt: skip
    return {
        "variant": variant,
        "platform": machines.pop(),
        "filename": wheel.name,
        "version": str(version),
        "url": url,
        "sha256": sha256(wheel.read_bytes()),
        "metadata_sha256": sha256(meta),
        "requires_python": requires_python,
        "aliases": _aliases(wheel, matrix),
    }


def read_manifest(source: str | None) -> list[dict]:
    """The entries of a published index (a URL or a folder); [] when there is none yet (the first release)."""
    if not source:
        return []
    location = source.rstrip("/") + "/" + MANIFEST
    if "://" in source:
        try:
            with urllib.request.urlopen(location, timeout=60) as response:
                data = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return []
            raise
    else:
        path = Path(location)
        if not path.exists():
            return []
        data = json.loads(path.read_text())
    if data.get("schema") != MANIFEST_SCHEMA:
        raise ValueError(f"{location}: manifest schema {data.get('schema')!r}, expected {MANIFEST_SCHEMA}")
    return data["wheels"]


def merge(previous: list[dict], new: list[dict]) -> list[dict]:
    """previous + new, by file name. A published file never changes: the same name with another hash is an error."""
    merged = {e["filename"]: e for e in previous}
    for e in new:
        old = merged.get(e["filename"])
        if old is not None and old["sha256"] != e["sha256"]:
            raise ValueError(
                f"{e['filename']} is already published with sha256 {old['sha256']}, the new build has {e['sha256']}: "
                "a release must not replace a published wheel (bump the version in ci/matrix.toml)"
            )
        merged[e["filename"]] = e
    return sorted(merged.values(), key=lambda e: (e["variant"], e["filename"]))


def _page(title: str, links: list[str]) -> str:
    body = "\n".join(f"    {link}<br/>" for link in links)
    return (
        '<!DOCTYPE html>\n<html>\n  <head><meta name="pypi:repository-version" content="1.0">'
        f"<title>{html.escape(title)}</title></head>\n  <body>\n    <h1>{html.escape(title)}</h1>\n{body}\n"
        "  </body>\n</html>\n"
    )


def _href(entry: dict, page_dir: str) -> str:
    """The wheel's URL as written on the page in folder `page_dir` (relative to the index root)."""
    url = entry["url"]
    return url if "://" in url else posixpath.relpath(url, page_dir)


def _link(entry: dict, page_dir: str) -> str:
    attrs = f'href="{html.escape(_href(entry, page_dir))}#sha256={entry["sha256"]}"'
    if entry.get("requires_python"):
        attrs += f' data-requires-python="{html.escape(entry["requires_python"])}"'
    meta = entry["metadata_sha256"]
    attrs += f' data-dist-info-metadata="sha256={meta}" data-core-metadata="sha256={meta}"'
    return f"<a {attrs}>{html.escape(entry['filename'])}</a>"


def entry_platform(entry: dict) -> str:
    """The machine a manifest entry's wheel is for (entries published before the platform field: from its name)."""
    if entry.get("platform"):
        return entry["platform"]
    _, _, _, tags = parse_wheel_filename(entry["filename"])
    return sorted(wheel_check.tag_machines(tags))[0]


def entry_platforms(entries: list[dict], variant: str) -> list[str]:
    """The machines a variant has wheels for, in the matrix's platform order."""
    have = {entry_platform(e) for e in entries if e["variant"] == variant}
    return [p for p in variant_matrix.rules.PLATFORMS if p in have]


def write_pages(entries: list[dict], out: Path, base_url: str | None = None) -> list[str]:
    """Every page of the index from its manifest entries; returns the variants."""
    out.mkdir(parents=True, exist_ok=True)
    variants = sorted({e["variant"] for e in entries})
    aliases: dict[str, set[str]] = {}
    for variant in variants:
        mine = [e for e in entries if e["variant"] == variant]
        (out / variant).mkdir(parents=True, exist_ok=True)
        (out / variant / "index.html").write_text(
            _page(f"visdet-ops wheels for {variant}", [_link(e, variant) for e in mine])
        )
        simple = out / variant / "simple"
        (simple / PROJECT).mkdir(parents=True, exist_ok=True)
        (simple / "index.html").write_text(_page("Simple index", [f'<a href="{PROJECT}/">{PROJECT}</a>']))
        links = [_link(e, f"{variant}/simple/{PROJECT}") for e in mine]
        (simple / PROJECT / "index.html").write_text(_page(f"Links for {PROJECT}", links))
        for e in mine:
            for alias in e["aliases"]:
                aliases.setdefault(alias, set()).add(variant)
    for alias, owners in sorted(aliases.items()):
        links = [_link(e, alias) for e in entries if e["variant"] in owners and alias in e["aliases"]]
        (out / alias).mkdir(parents=True, exist_ok=True)
        title = f"visdet-ops wheels for {alias} (= {', '.join(sorted(owners))})"
        (out / alias / "index.html").write_text(_page(title, links))
    prefix = (base_url.rstrip("/") + "/") if base_url else ""
    # The stable variants first, with what they serve (the import check and the doctor recommend them).
    rules = variant_matrix.rules
    ordered = sorted(variants, key=lambda v: not rules.is_stable_variant(v))  # stable first, else in order
    top = [
        f'<a href="{v}/">{v}</a>: <code>pip install visdet-ops -f {html.escape(prefix)}{v}/</code>'
        + (f" ({html.escape(rules.variant_note(v).split(': ', 1)[1])})" if rules.is_stable_variant(v) else "")
        + f" [{', '.join(entry_platforms(entries, v))}]"
        for v in ordered
    ]
    (out / "index.html").write_text(_page("visdet-ops wheel index", top))
    (out / MANIFEST).write_text(json.dumps({"schema": MANIFEST_SCHEMA, "wheels": entries}, indent=1) + "\n")
    return variants


def build(
    wheelhouse: Path,
    out: Path,
    base_url: str | None = None,
    previous: str | None = None,
    wheel_url: str | None = None,
    assets_out: Path | None = None,
) -> list[str]:
    """Adds wheelhouse/<variant>/*.whl to the index at `out` (merged with `previous`); returns its variants."""
    if (wheel_url is None) != (assets_out is None):
        raise ValueError("--wheel-url and --assets-out go together")
    matrix = variant_matrix.load()
    new = []
    for vdir in sorted(p for p in wheelhouse.iterdir() if p.is_dir()):
        for wheel in sorted(vdir.glob("*.whl")):
            variant = vdir.name
            if wheel_url is None:
                dest = out / variant
                url = f"{variant}/{wheel.name}"
            else:
                dest = assets_out
                url = f"{wheel_url.rstrip('/')}/{wheel.name}"
            entry = describe_wheel(wheel, variant, url, matrix)
            dest.mkdir(parents=True, exist_ok=True)
            if wheel.resolve() != (dest / wheel.name).resolve():
                shutil.copy2(wheel, dest / wheel.name)
            (dest / f"{wheel.name}.metadata").write_bytes(_metadata(wheel))
            new.append(entry)
    previous_entries = read_manifest(previous)
    stranded = [e["filename"] for e in previous_entries if "://" not in e["url"] and not (out / e["url"]).exists()]
    if stranded:
        raise ValueError(f"the previous index lists wheels by relative URL that are not under {out}/: {stranded}")
    entries = merge(previous_entries, new)
    return write_pages(entries, out, base_url) if entries else []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheelhouse", type=Path, default=Path("wheelhouse"))
    parser.add_argument("--out", type=Path, default=Path("index"))
    parser.add_argument("--base-url", default=None, help="URL the index is served at (for the pip lines)")
    parser.add_argument(
        "--previous",
        default=None,
        help="the published index (URL or folder) whose manifest.json the new wheels are merged into "
        "(a release); default: none, the index lists wheelhouse/ only",
    )
    parser.add_argument("--wheel-url", default=None, help="where the new wheels will be downloadable (release URL)")
    parser.add_argument("--assets-out", type=Path, default=None, help="folder for the wheels + .metadata to upload")
    args = parser.parse_args(argv)
    if not args.wheelhouse.is_dir():
        print(f"no {args.wheelhouse}/ folder: build a wheel first (nox -s build-cpu)", file=sys.stderr)
        return 1
    variants = build(args.wheelhouse, args.out, args.base_url, args.previous, args.wheel_url, args.assets_out)
    if not variants:
        print(f"no wheels under {args.wheelhouse}/<variant>/", file=sys.stderr)
        return 1
    print(f"index at {args.out}/: {', '.join(variants)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
