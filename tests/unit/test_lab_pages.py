"""Every teaching lab page has its sections and runnable commands (no root needed)."""

from tests.emulation.test_labs import LABS, lab_commands


def test_every_lab_has_commands():
    assert [p.name for p in LABS] == ["lab1-incast-and-tcp.md", "lab2-tolerating-loss.md",
                                      "lab3-your-own-transport.md",
                                      "lab4-killing-a-worker.md",
                                      "lab5-byzantine-workers.md", "lab6-peer-to-peer.md",
                                      "lab7-the-incast-vanishes.md",
                                      "lab8-ranking-on-one-trace.md"]
    for page in LABS:
        assert lab_commands(page), page.name
        text = page.read_text()
        for section in ("## Goals", "## What you should observe", "## Questions"):
            assert section in text, (page.name, section)
