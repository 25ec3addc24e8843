"""Grading one lab on a student's results folder: what is right, what is not, and the numbers.

A lab's grader (in ``basics.py`` or ``advanced.py`` here, registered in :data:`LABS`) reads the
folder its sweep wrote and fills a :class:`Sheet` with verdicts of three kinds:

- **the data**: the folder is the lab's sweep and its runs finished; every measured iteration
  against the physical bound of its run (no transfer beats the link);
- **the observations**: each statement of the page's "What you should observe", tested on the
  student's own rows, with the numbers compared;
- **the answers**: the questions with a number for an answer, compared with what the student's
  own tables give, within a stated tolerance, when the student wrote the answers in a TOML file
  (``q1 = 0.12``; ``invoke lab-check N --sweep DIR --answers FILE``). Without the file the grader
  says which questions it can check, and never prints the expected number.

A verdict is right (``True``), wrong (``False``) or a note (``None``: something the student
should look at that no rule decides). The grade's exit status is 1 if anything is wrong.
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from harness.running.provenance import read_manifest
from transports.base import UserError

MARKS = {True: "right", False: "WRONG", None: "note "}


@dataclasses.dataclass(frozen=True)
class Verdict:
    """One line of a grade: what was checked (``item``: "data", "statement 2", "Q1"), whether
    it holds (``ok``; ``None`` for a note) and the numbers compared (``text``)."""

    item: str
    ok: bool | None
    text: str

    def line(self) -> str:
        return f"{MARKS[self.ok]}  {self.item}: {self.text}"


class Sheet:
    """The verdicts of one grade, and the folder and answers they are about."""

    def __init__(self, lab: int, folder: Path, answers: dict[str, float] | None = None,
                 tables_only: bool = False):
        self.lab, self.folder, self.answers = lab, Path(folder), dict(answers or {})
        # A committed folder keeps its tables, not its runs' own files (runs/: captures, loss
        # records): checks that need those become notes there instead of failing, whether or not
        # a runs/ happens to lie beside the tables here (so the published text is the same on
        # every checkout).
        self.tables_only = tables_only
        self.verdicts: list[Verdict] = []

    def needs_runs(self, item: str) -> bool:
        """Whether ``item``'s checks can read the runs' own files; if not, a note says why."""
        if self.tables_only:
            self.note(item, "needs the runs' own files (runs/), which a committed folder does "
                            "not keep: checked on a sweep folder as run-sweep leaves it")
            return False
        return True

    def check(self, item: str, ok, text: str) -> bool:
        """Record whether ``ok`` holds for ``item``; return it."""
        self.verdicts.append(Verdict(item, bool(ok), text))
        return bool(ok)

    def note(self, item: str, text: str) -> None:
        self.verdicts.append(Verdict(item, None, text))

    def answer(self, question: str, expected: float, tolerance: float, what: str) -> None:
        """Compare the student's answer to ``question`` (``"q1"``) with ``expected`` (what their
        own tables give) within ``tolerance``; ``what`` says what the number is, with its unit."""
        item = question.upper()
        if question not in self.answers:
            self.note(item, f"{what}: no answer given (write `{question} = <number>` in the "
                            "answers file, --answers)")
            return
        given = self.answers[question]
        self.check(item, abs(given - expected) <= tolerance,
                   f"{what}: you answered {given:g}, your own data give {expected:.4g} "
                   f"(accepted within ±{tolerance:g})")

    @property
    def passed(self) -> bool:
        return all(v.ok is not False for v in self.verdicts)

    def text(self) -> str:
        wrong = sum(v.ok is False for v in self.verdicts)
        right = sum(v.ok is True for v in self.verdicts)
        head = (f"Lab {self.lab}, {self.folder}: {right} right, {wrong} wrong, "
                f"{len(self.verdicts) - right - wrong} notes")
        return "\n".join([head, *(v.line() for v in self.verdicts)])


# ---- reading a student's folder ----------------------------------------------------------------


def table(folder: Path, name: str) -> pd.DataFrame:
    """``folder/name`` (``runs.csv``, ``iterations.csv``...), or a :class:`UserError`."""
    path = Path(folder) / name
    if not path.is_file():
        raise UserError(f"{path} does not exist: --sweep must name the folder a lab's "
                        "run-sweep wrote (e.g. results/lab1).")
    return pd.read_csv(path)


def read_answers(path: Path | None) -> dict[str, float]:
    """``q1 = 0.2``, one per question, from a TOML file (``None``: no answers)."""
    if path is None:
        return {}
    try:
        raw = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise UserError(f"--answers {path}: not a readable TOML file ({err}).") from None
    out = {}
    for key, value in raw.items():
        if not key.lower().startswith("q") or not isinstance(value, (int, float)):
            raise UserError(f"--answers {path}: write each answer as `q1 = 0.25` (a number), "
                            f"not {key} = {value!r}.")
        out[key.lower()] = float(value)
    return out


def threshold_min(row) -> float:
    """The early-close floor a run's LTP options set (0 when they set none)."""
    return json.loads(row.transport_options).get("threshold_min", 0.0)


def common(sheet: Sheet, preset: str) -> pd.DataFrame:
    """What every lab checks first: the folder is the lab's sweep, and its runs finished. Its
    runs (``runs.csv``)."""
    runs = table(sheet.folder, "runs.csv")
    man = read_manifest(sheet.folder)   # a PS sweep names its plan; a peer-to-peer one its preset
    made_by = man.get("preset") or (man.get("plan") or {}).get("name")
    sheet.check("data", made_by == preset,
                f"the folder is the sweep of `--preset {preset}`" if made_by == preset else
                f"the folder was made by preset {made_by or 'unknown'}, not by this lab's "
                f"`--preset {preset}`")
    bad = runs[runs.status != "ok"]
    sheet.check("data", bad.empty and len(runs) > 0,
                f"{len(runs) - len(bad)} of {len(runs)} runs finished ok"
                + (f"; not ok: {', '.join(bad.run_id.astype(str)[:5])}" if len(bad) else ""))
    return runs


def per_seed(runs: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """The runs seed by seed, each with the words a check's text names its seed by (none when the
    folder holds one seed): a statement that sets cells side by side compares runs of one seed."""
    if "seed" not in runs or runs.seed.nunique() <= 1:
        return [("", runs)]
    return [(f" (seed {int(seed)})", part) for seed, part in runs.groupby("seed")]


def push_bounds(runs: pd.DataFrame, iterations: pd.DataFrame) -> pd.Series:
    """Each iteration's run's physical push bound (``push_bound_s``), aligned with its rows."""
    return iterations.run_id.map(dict(zip(runs.run_id, runs.push_bound_s)))


def against_bound(sheet: Sheet, runs: pd.DataFrame, iterations: pd.DataFrame,
                  by_received: bool = False) -> None:
    """Every measured push against its run's physical bound (``push_bound_s``: n gradients
    through the PS's link at its rate). No push can beat it; with ``by_received`` (a transport
    that closes early) only the bytes that arrived must cross, so the bound is scaled by the
    iteration's mean received fraction. 1 % is allowed for the clocks."""
    bound = push_bounds(runs, iterations)
    if by_received:
        bound = bound * iterations.mean_recv_frac.fillna(1.0)
    ratio = iterations.push_s / bound
    ok = ratio.dropna()
    below = int((ok < 0.99).sum())
    sheet.check("data", len(ok) > 0 and below == 0,
                f"{len(ok)} pushes measured against the physical bound: {below} faster than "
                f"it (impossible; a clock or a table is wrong); the fastest took "
                f"{ok.min() if len(ok) else float('nan'):.2f}x the bound, the median "
                f"{ok.median() if len(ok) else float('nan'):.2f}x")


Grader = Callable[[Sheet], None]
LABS: dict[int, tuple[str, Grader]] = {}


def lab(number: int, page: str):
    """Register the decorated function as lab ``number``'s grader (its page ``page``)."""
    def register(fn: Grader) -> Grader:
        LABS[number] = (page, fn)
        return fn
    return register


def grade(number: int, folder: Path, answers: dict[str, float] | None = None,
          tables_only: bool = False) -> Sheet:
    """Grade lab ``number`` on ``folder`` (``tables_only``: a committed folder, see
    :class:`Sheet`); a :class:`UserError` for a lab that does not exist."""
    from harness.reporting.labs import graders  # noqa: F401  (registers every lab)

    if number not in LABS:
        raise UserError(f"there is no lab {number}: the labs are "
                        f"{', '.join(map(str, sorted(LABS)))} (docs/labs/README.md).")
    if not Path(folder).is_dir():
        raise UserError(f"--sweep {folder}: no such folder.")
    sheet = Sheet(number, folder, answers, tables_only)
    LABS[number][1](sheet)
    return sheet
