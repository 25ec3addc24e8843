"""Transport options as people read them: ``invoke transports`` and the tables in ``docs/``.

Everything here is rendered from the option tables (:class:`transports.base.Option` rows, LTP's
built from the native core's ``ltp_option`` table, the peer transports' from
:data:`transports.peer.SCHEMES`) and the registry, so the docs cannot disagree
with what validation accepts. ``invoke docs`` calls :func:`regenerate`, which rewrites the text
between ``<!-- generated: KEY -->`` and ``<!-- /generated -->`` in each page of :data:`PAGES`.

    .venv/bin/invoke transports --slug ltp      # one scheme and its options
    .venv/bin/invoke docs                       # rewrite the generated tables
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from transports import registry
from transports.base import Option, Transport


def _value(v: Any) -> str:
    """A value as it is written in a spec or on the command line."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, (tuple, list)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return str(v)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def options_markdown(rows: Iterable[Option], core_column: bool = False) -> str:
    """A markdown table of option rows: name, default, values, unit, meaning."""
    rows = list(rows)
    head = "| option | default | values | unit | meaning |"
    rule = "|---|---|---|---|---|"
    if core_column:
        head, rule = head + " core field |", rule + "---|"
    lines = [head, rule]
    for o in rows:
        line = (f"| `{o.name}` | `{_value(o.default)}` | {_cell(o.describe())} | {o.unit} | "
                f"{_cell(o.help)} |")
        if core_column:
            line += f" {'`' + o.native + '`' if o.native else ''} |"
        lines.append(line)
    return "\n".join(lines) + "\n"


def core_only_markdown() -> str:
    """The native core's fields that no LTP option sets (settable in C with ltp_config_set)."""
    from transports import ltp, native

    used = {o.native for o in ltp.ltp_options() if o.native} | {"max_msg_bytes"}
    rows = [Option(c.name, c.default, c.kind, c.low if c.kind in ("int", "float") else None,
                   c.high if c.kind in ("int", "float") else None, c.choices, c.unit, c.help)
            for c in native.core_options().values() if c.name not in used]
    return options_markdown(rows)


def schemes_markdown() -> str:
    """The built-in schemes with their transport class and the options that define them."""
    lines = ["| slug | transport | fixed options | loss tolerant | what |", "|---|---|---|---|---|"]
    for info in registry.BUILTIN:
        fixed = ", ".join(f"`{k}={_value(v)}`" for k, v in info.fixed_options.items()) or "none"
        lines.append(f"| `{info.slug}` | `{info.target}` | {fixed} | "
                     f"{'yes' if info.loss_tolerant else 'no'} | {_cell(info.description)} |")
    return "\n".join(lines) + "\n"


def scheme_text(info: registry.TransportInfo) -> str:
    """One scheme and its options as plain text (``invoke transports``)."""
    out = [f"{info.slug:20} {info.display_name:24} {info.description}"]
    try:
        rows = info.option_rows()
    except Exception as exc:   # e.g. the native library is not built: say so, keep listing
        return out[0] + f"\n    (options unavailable: {exc})"
    for o, value, fixed in rows:
        unit = f" {o.unit}" if o.unit else ""
        mark = "fixed" if fixed else o.describe()
        out.append(f"    {o.name:24} {_value(value) + unit:18} {mark}; {o.help}")
    return "\n".join(out)


def schemes_text(slug: str | None = None) -> str:
    """Every registered scheme (or only ``slug``) with its options, as plain text."""
    infos = [registry.get(slug)] if slug else registry.entries()
    return "\n\n".join(scheme_text(info) for info in infos)


def _table(cls: Callable[[], type[Transport]], keep: Callable[[Option], bool] = lambda o: True,
           core_column: bool = False) -> Callable[[], str]:
    return lambda: options_markdown([o for o in cls().option_table() if keep(o)], core_column)


def _cls(slug: str) -> Callable[[], type[Transport]]:
    """A registered scheme's class, imported only when a page is made."""
    return lambda: registry.get(slug).transport_class()


_ltp = _cls("ltp")
_plot = _cls("plot")
_phase = _cls("phase-bound")
_mlt = _cls("mlt")
_optireduce = _cls("optireduce")
_tcp = _cls("tcp-cubic")


def _peer(slug: str) -> Callable[[], str]:
    def make() -> str:
        from transports.peer import SCHEMES
        return options_markdown(SCHEMES[slug].OPTIONS)
    return make


def _not_ltps(o: Option) -> bool:
    """An option of a transport built on LTP's core that is not one of LTP's as LTP has it
    (PLOT's adaptive-rule weights share LTP's names and ranges but apply under that rule only;
    MLT's filler and OptiReduce's max_wait_ms differ in default or meaning)."""
    return o not in _ltp().option_table()


def _shared(transport: Callable[[], type[Transport]], label: str) -> Callable[[], str]:
    """The sentence that lists the LTP options ``transport`` takes as LTP has them."""
    def make() -> str:
        shared = [o.name for o in transport().option_table() if not _not_ltps(o)]
        return (f"{label} also takes these LTP options, with LTP's defaults and ranges: "
                + ", ".join(f"`{n}`" for n in shared) + ".\n")
    return make


# page -> {marker key: what goes between the markers}
PAGES: dict[str, dict[str, Callable[[], str]]] = {
    "docs/ltp-protocol.md": {"ltp-options": _table(_ltp, core_column=True),
                             "ltp-core-only": core_only_markdown},
    "docs/plot-protocol.md": {"plot-options": _table(_plot, _not_ltps),
                              "plot-shared": _shared(_plot, "PLOT")},
    "docs/adding-a-transport.md": {"tcp-options": _table(_tcp), "schemes": schemes_markdown},
    "docs/phase-bound.md": {"phase-options": _table(_phase, _not_ltps),
                            "phase-shared": _shared(_phase, "phase-bound")},
    "docs/mlt.md": {"mlt-options": _table(_mlt, _not_ltps), "mlt-shared": _shared(_mlt, "MLT")},
    "docs/optireduce.md": {"optireduce-options": _table(_optireduce, _not_ltps),
                           "optireduce-shared": _shared(_optireduce, "OptiReduce")},
    "docs/peer-transports.md": {"peer-mcast-options": _peer("mcast"),
                                "peer-tcp-options": _peer("tcp")},
}


def fill(text: str, key: str, body: str) -> str:
    """Replace what lies between the ``key`` markers in ``text`` with ``body``."""
    pattern = re.compile(rf"(<!-- generated: {re.escape(key)} -->\n).*?(<!-- /generated -->)",
                         re.S)
    if not pattern.search(text):
        raise ValueError(f"no '<!-- generated: {key} -->' ... '<!-- /generated -->' markers found.")
    return pattern.sub(lambda m: m.group(1) + "\n" + body + "\n" + m.group(2), text, count=1)


def regenerate(root: Path) -> list[Path]:
    """Rewrite every generated table of :data:`PAGES` under ``root``; returns the pages."""
    written = []
    for page, parts in PAGES.items():
        path = root / page
        text = path.read_text()
        for key, make in parts.items():
            text = fill(text, key, make())
        path.write_text(text)
        written.append(path)
    return written
