"""Counts compute-sanitizer reports by the kernel they are in, and tells our kernels from NVIDIA's libraries'.

  python -m ci.sanitizer_report LOG [LOG ...]      (exit 0 only if no report counts)

A report is a memcheck or initcheck error (its header line, then `at <kernel>+0x..`) or a racecheck hazard
(`Race reported between <access> at <kernel> ...`). It counts unless its kernel is one of NVIDIA's libraries' own
(cuBLAS, cuBLASLt, cuDNN, CUTLASS: VENDOR_KERNEL), which issue 25 lists by name and does not count; everything
else (our kernels, torch's, a host API error) counts. Every report must be printed for this (`--print-limit 0`;
`--show-backtrace no` keeps the log small): a log whose summary counts more reports than it printed fails, since the
rest cannot be attributed. Standard library only (ci/gpu_check.py runs it on the GPU machine)."""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

PREFIX = "========= "
# Kernels of NVIDIA's libraries: cuBLAS / cuBLASLt (nvjet_*, sm*_xmma_*, cublas*, gemv/gemm kernels of their
# own), cuDNN (cudnn::...), CUTLASS (cutlass::... as cuBLAS ships it).
VENDOR_KERNEL = re.compile(
    r"^(void )?(cudnn::|cublas|cublasLt::|cutlass::|cutlass_|nvjet_|sm\d+_xmma_|xmma_|ampere_|volta_|turing_)"
)
SUMMARY = re.compile(r"^(ERROR SUMMARY: (\d+) errors?$|RACECHECK SUMMARY: (\d+) hazards? displayed)")
RACE = re.compile(r"^(Error|Warning): Race reported between \w+ access at (.+?)(\s*$)")
AT = re.compile(r"^\s+at (.+)$")
NOT_A_REPORT = ("COMPUTE-SANITIZER", "ERROR SUMMARY", "RACECHECK SUMMARY", "LEAK SUMMARY")


def kernel_name(frame: str) -> str:
    """`void ns::k<T, (bool)1>(const T1 *, long)+0x3ae0` -> `void ns::k<T, (bool)1>`: no offset, no argument list."""
    frame = re.sub(r"\+0x[0-9a-fA-F]+$", "", frame.strip())
    frame = re.sub(r"\s+in\s+\S+$", "", frame)  # `... in file.cu:12` of a line-info build
    depth = 0
    for i, ch in enumerate(frame):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0 and i > 0:
            return frame[:i]
    return frame


def is_vendor(kernel: str) -> bool:
    return bool(VENDOR_KERNEL.match(kernel))


@dataclass
class Report:
    """What one log holds: reports per kernel, and what its summary lines say."""

    path: str
    kernels: Counter = field(default_factory=Counter)
    summarised: int = 0
    has_summary: bool = False

    @property
    def printed(self) -> int:
        return sum(self.kernels.values())

    @property
    def counted(self) -> Counter:
        return Counter({k: n for k, n in self.kernels.items() if not is_vendor(k)})

    @property
    def vendor(self) -> Counter:
        return Counter({k: n for k, n in self.kernels.items() if is_vendor(k)})

    def problems(self) -> list[str]:
        found = []
        if not self.has_summary:
            found.append(f"{self.path}: no summary line (the tool did not finish)")
        if self.printed < self.summarised:
            found.append(
                f"{self.path}: the summary counts {self.summarised} reports, {self.printed} printed: run the tool "
                "with --print-limit 0 so that each can be attributed"
            )
        found += [f"{self.path}: {n} in {k}" for k, n in self.counted.most_common()]
        return found


def parse(text: str, path: str = "log") -> Report:
    report = Report(path)
    pending = None  # the header of a memcheck / initcheck error whose kernel is still to come
    for raw in text.splitlines():
        if not raw.startswith(PREFIX.rstrip()):
            continue
        line = raw[len(PREFIX) :] if raw.startswith(PREFIX) else ""
        summary = SUMMARY.match(line)
        if summary:
            report.has_summary = True
            report.summarised += int(summary.group(2) or summary.group(3))
            continue
        race = RACE.match(line)
        if race:
            report.kernels[kernel_name(race.group(2))] += 1
            continue
        at = AT.match(line)
        if at and pending is not None:
            report.kernels[kernel_name(at.group(1))] += 1
            pending = None
            continue
        if line and not line[0].isspace() and not line.startswith(NOT_A_REPORT):
            if pending is not None:  # a header with no kernel frame: a host-side error
                report.kernels["(host: " + pending + ")"] += 1
            pending = line
    if pending is not None:
        report.kernels["(host: " + pending + ")"] += 1
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("logs", nargs="+", type=Path)
    args = parser.parse_args(argv)
    problems = []
    for path in args.logs:
        report = parse(path.read_text(errors="replace"), str(path))
        print(f"{path}: {report.summarised} reported, {report.printed} printed, {sum(report.counted.values())} count")
        for kernel, n in report.vendor.most_common():
            print(f"  not counted (NVIDIA library kernel): {n} in {kernel}")
        for kernel, n in report.counted.most_common():
            print(f"  COUNTS: {n} in {kernel}")
        problems += report.problems()
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
