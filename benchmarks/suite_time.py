"""The test suite's time per folder, from pytest's JUnit XML (``--junitxml``).

    python benchmarks/suite_time.py before.xml [after.xml]

Prints, per top-level folder of ``tests/``, the number of tests and the sum of their times
(setup, call and teardown, as pytest reports them), for one run or two side by side. In a run
on one process the sum is the folder's wall time; on xdist workers it is the work the folder
gave the workers (their wall time is the run's, divided among them). See benchmarks/README.md,
"The test suite's time".
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict


def per_folder(path: str) -> dict[str, tuple[int, float]]:
    """``{folder: (tests, seconds)}`` of one JUnit XML report."""
    counts: dict[str, int] = defaultdict(int)
    seconds: dict[str, float] = defaultdict(float)
    for case in ET.parse(path).iter("testcase"):
        parts = case.get("classname", "").split(".")
        folder = parts[1] if len(parts) > 2 and not parts[1].startswith("test_") else "(top)"
        counts[folder] += 1
        seconds[folder] += float(case.get("time") or 0.0)
    return {folder: (counts[folder], seconds[folder]) for folder in counts}


def main(paths: list[str]) -> None:
    runs = [per_folder(path) for path in paths]
    folders = sorted(set().union(*runs), key=lambda f: -runs[0].get(f, (0, 0.0))[1])
    header = "| folder | tests | " + " | ".join(f"s ({path})" for path in paths) + " |"
    print(header)
    print("|---|---:|" + "---:|" * len(paths))
    for folder in folders:
        tests = runs[-1].get(folder, runs[0].get(folder, (0, 0.0)))[0]
        times = " | ".join(f"{run.get(folder, (0, 0.0))[1]:.0f}" for run in runs)
        print(f"| {folder} | {tests} | {times} |")
    totals = " | ".join(f"{sum(s for _, s in run.values()):.0f}" for run in runs)
    print(f"| all | {sum(n for n, _ in runs[-1].values())} | {totals} |")


if __name__ == "__main__":
    main(sys.argv[1:])
