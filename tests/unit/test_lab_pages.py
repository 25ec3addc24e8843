"""Every teaching lab page has its sections and runnable commands, and every command a question
gives is whole and plans (no root needed)."""

import re
import shlex

from invoke import Collection, Program

from tests.emulation.test_labs import LABS, lab_commands


def test_every_lab_has_commands():
    assert [p.name for p in LABS] == ["lab1-incast-and-tcp.md", "lab2-tolerating-loss.md",
                                      "lab3-your-own-transport.md",
                                      "lab4-killing-a-worker.md",
                                      "lab5-byzantine-workers.md", "lab6-peer-to-peer.md",
                                      "lab7-the-incast-vanishes.md",
                                      "lab8-ranking-on-one-trace.md",
                                      "lab9-reading-the-wire.md"]
    for page in LABS:
        assert lab_commands(page), page.name
        text = page.read_text()
        for section in ("## Goals", "## What you should observe", "## Questions"):
            assert section in text, (page.name, section)


def question_commands(page) -> list[str]:
    """The ``invoke`` commands written inline (in backticks) in a lab page's questions."""
    questions = page.read_text().split("## Questions", 1)[1]
    return [" ".join(c.split()) for c in re.findall(r"`(\.venv/bin/invoke [^`]+)`", questions)]


def test_every_command_in_a_question_is_whole_and_plans(capsys):
    """A student copies a question's command as it stands: each is a whole command (no bare
    option to add to something), and run-sweep accepts it and plans its runs (--dry-run)."""
    import tasks

    program = Program(namespace=Collection.from_module(tasks), binary="invoke")
    planned = 0
    for page in LABS:
        text = page.read_text().split("## Questions", 1)[1]
        bare = re.findall(r"`(--[a-z-]+[^`]*)`", text)
        assert not bare, f"{page.name}: an option without its command: {bare}"
        for command in question_commands(page):
            # a recorded trace the student makes first: plan with the lab's own trace instead
            command = re.sub(r"results/\S+/runs/RUN_ID/loss", "docs/labs/traces/lab8", command)
            argv = ["invoke", *shlex.split(command)[1:], "--dry-run"]
            program.run(argv, exit=False)
            out = capsys.readouterr().out
            assert re.search(r"^\d+ runs of preset ", out, re.M), (page.name, command, out)
            planned += 1
    assert planned >= 8
