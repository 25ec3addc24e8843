"""The mutation check of the core's defences: each defence removed in turn must fail a C test.

``make -C transports/native mutants`` (or ``python3 tests/mutants.py`` from transports/native):
for every :data:`MUTANTS` entry, copy the core and its tests into a temporary folder, remove the
defence (one exact piece of source text replaced, found exactly once, so a mutant that no longer
matches the code fails the check instead of passing unnoticed), build the tests that exercise the
receive path and run them. A mutant is *killed* when a test fails or crashes on it; the check
fails if any survives, if the unmutated copy fails, or if a mutant does not build. Issue 29, item
4: the first five defences below were the ones no test guarded.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]      # transports/native
TESTS = ("test_guards", "test_trust", "test_pairs", "test_core")
RUN_TIMEOUT_S = 300


@dataclasses.dataclass(frozen=True)
class Mutant:
    """A defence and how to remove it: ``old`` (exactly once in ``path``) becomes ``new``."""

    name: str
    path: str
    old: str
    new: str


_ACK_ECHO = "    if (!echo_sent(m, h)) { c->st[LTP_S_BAD_ECHO]++; return LTP_EREJECTED; }\n"
MUTANTS = (
    # the five no test guarded before tests/test_guards.c
    Mutant("untagged datagrams accepted with auth on", "src/ltp_auth.c",
           "    if (!p) return LTP_EPEER;   /* no slot, no key to check it with */\n",
           "    if (!p) return LTP_EPEER;   /* no slot, no key to check it with */\n"
           "    if (b[WIRE_MAC] == LTP_MAC_NONE) return (int)len;\n"),
    Mutant("the HELLO_ACK's nonce not checked", "src/ltp_core.c",
           "    if (h->msg_id != p->hello_nonce) { c->st[LTP_S_BAD_ECHO]++; return LTP_EREJECTED; }\n",
           ""),
    Mutant("the CLOSE's echo not checked", "src/ltp_send.c",
           _ACK_ECHO + "    /* The receiver cannot hold", "    /* The receiver cannot hold"),
    Mutant("a hint obeyed beyond hint_ttl_max_us", "src/ltp_rate.c",
           "MIN(hint_ttl_us(c, p, p->hint_rate), (uint64_t)c->cfg.hint_ttl_max_us)",
           "hint_ttl_us(c, p, p->hint_rate)"),
    Mutant("an advertised srtt believed unclamped", "src/ltp_admit.c",
           "return MIN((double)srtt_us, (double)c->cfg.max_wait_us);", "return (double)srtt_us;"),
    # issue 28: the join's RTT sample (Karn's rule: an answer to an earlier HELLO is not timed)
    Mutant("an answer to an earlier HELLO timed", "src/ltp_core.c",
           "    int latest = p->hello_sends && h->segment == (uint16_t)p->hello_sends;",
           "    int latest = p->hello_sends > 0;"),
    # defences the suite guarded already
    Mutant("the ACK's echo not checked", "src/ltp_send.c",
           _ACK_ECHO + "    rate_on_hint(", "    rate_on_hint("),
    Mutant("a wrong tag accepted", "src/ltp_auth.c", "    if (diff) return LTP_EAUTH;\n", ""),
    Mutant("no replay window", "src/ltp_core.c",
           "    if ((rc = auth_window(c, p, pseq)) != LTP_OK) return rc;", "    (void)pseq;"),
    Mutant("another run's session accepted", "src/ltp_core.c",
           "    if (h.session != c->cfg.session_id) { c->st[LTP_S_WRONG_SESSION]++; "
           "return LTP_ESESSION; }\n", ""),
    Mutant("a rank sent from another peer's slot accepted", "src/ltp_core.c",
           "if (!p || p->rank != h.sender)", "if (!p)"),
    Mutant("a CLOSE's count and received not checked", "src/ltp_send.c",
           "    if (h->close_count != m->count || h->received > m->packets + m->sent_before) {",
           "    if (0) {"),
    Mutant("a hint's rate not clamped", "src/ltp_rate.c",
           "    if (mbps < c->cfg.hint_min_mbps || mbps > c->cfg.hint_max_mbps) {", "    if (0) {"),
    Mutant("a DATA's open_back believed without auth", "src/ltp_core.c",
           "if (c->cfg.auth) rx_note_sender_floor(p, &h);", "rx_note_sender_floor(p, &h);"),
    Mutant("DATA admitted without its checks", "src/ltp_core.c",
           "        if ((rc = admit_data(c, p, &h)) != LTP_OK) return rc;\n", ""),
)


def _copy(dest: Path) -> None:
    for part in ("include", "src", "tests", "sim", "Makefile"):
        src = HERE / part
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dest / part)
    # the simulator's loss chain, included by a path relative to the Makefile
    chain = HERE.parents[1] / "topologies" / "impair" / "geloss"
    (dest.parents[1] / "topologies" / "impair").mkdir(parents=True, exist_ok=True)
    shutil.copytree(chain, dest.parents[1] / "topologies" / "impair" / "geloss",
                    dirs_exist_ok=True, ignore=shutil.ignore_patterns("build"))


def _apply(tree: Path, m: Mutant) -> None:
    path = tree / m.path
    text = path.read_text()
    if text.count(m.old) != 1:
        raise SystemExit(f"mutant {m.name!r}: its text is in {m.path} {text.count(m.old)} times, "
                         "not once; update tests/mutants.py to the code")
    path.write_text(text.replace(m.old, m.new))


def _test(tree: Path) -> str | None:
    """Build and run the tests in ``tree``; the first that failed, or None if all passed."""
    binaries = [f"build/{t}" for t in TESTS]
    built = subprocess.run(["make", "-s", "-j2", "CFLAGS=-O1 -g", *binaries], cwd=tree,
                           capture_output=True, text=True)
    if built.returncode != 0:
        raise RuntimeError(f"does not build: {built.stderr.strip()[-400:]}")
    for test in TESTS:
        try:
            run = subprocess.run([f"./build/{test}"], cwd=tree, capture_output=True, text=True,
                                 timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return f"{test} (timed out)"
        if run.returncode != 0:
            return test
    return None


def check(mutants=MUTANTS, say=print) -> int:
    """Run the check; return the number of problems (survivors, mutants that do not build, a
    failing baseline)."""
    problems = 0
    with tempfile.TemporaryDirectory(prefix="ltp-mutants-") as tmp:
        base = Path(tmp) / "transports" / "native"
        base.mkdir(parents=True)
        _copy(base)
        failed = _test(base)
        if failed:
            say(f"the unmutated core fails {failed}: fix that first")
            return 1
        for m in mutants:
            tree = Path(tmp) / "mutant" / "transports" / "native"
            shutil.rmtree(tree.parents[1], ignore_errors=True)
            tree.mkdir(parents=True)
            _copy(tree)
            _apply(tree, m)
            t0 = time.monotonic()
            try:
                killer = _test(tree)
            except RuntimeError as err:
                say(f"ERROR    {m.name}: {err}")
                problems += 1
                continue
            took = time.monotonic() - t0
            if killer:
                say(f"killed   {m.name} (by {killer}, {took:.0f} s)")
            else:
                say(f"SURVIVED {m.name} ({m.path}): no test fails without it")
                problems += 1
    say(f"{len(mutants)} mutants, {problems} problems")
    return problems


if __name__ == "__main__":
    sys.exit(1 if check() else 0)
