"""Write docs/cli.md, the CLI reference, from the Typer app itself.

    python scripts/cli_reference.py            # rewrite docs/cli.md
    python scripts/cli_reference.py --check    # exit 1 when docs/cli.md is stale

Every command of `tuner.cli.app` with its help text, its usage line and a table of its
arguments and options: flag, type (with its range), default and help, as `--help` shows them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import typer.main

from tuner.cli import app

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "docs" / "cli.md"
COMMAND = "python scripts/cli_reference.py"

HEADER = f"""# CLI reference

Generated from the Typer app by `{COMMAND}`; do not edit by hand (a test
fails when this file is stale). Every command prints the same with `--help`. Exit codes and an
overview of the commands are in [the docs index](README.md).
"""


def _cell(text: str) -> str:
    """Text safe inside one markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def _split_extras(help_text: str) -> tuple[str, list[str]]:
    """Help text and the bracketed extras click appends (default, range, required)."""
    head, sep, tail = help_text.rpartition("  [")
    if not sep or not tail.endswith("]"):
        return help_text, []
    return head, tail[:-1].split("; ")


def _option_row(flags: str, help_text: str) -> str:
    """One option's row: flag, type (with its range), default, help."""
    flag, _, metavar = flags.partition(" <")
    text, extras = _split_extras(help_text)
    default = next((e.removeprefix("default: ") for e in extras if e.startswith("default: ")), "")
    if "required" in extras:
        default = "required"
    kind = metavar.rstrip(">") or "flag"
    ranges = [e for e in extras if e != "required" and not e.startswith("default: ")]
    if ranges:
        kind = f"{kind} ({', '.join(ranges)})"
    cells = [f"`{flag}`", kind, f"`{default}`" if default else "", text]
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def _param_row(param: Any, ctx: Any) -> str | None:
    """One table row for an option or argument; None for hidden ones."""
    if getattr(param, "hidden", False):
        return None
    if param.param_type_name == "argument":
        need = "required" if param.required else ""
        help_text = getattr(param, "help", None) or ""
        return f"| `{param.name.upper()}` | argument | {need} | {_cell(help_text)} |"
    record = param.get_help_record(ctx)
    return None if record is None else _option_row(*record)


def _command_section(name: str, command: Any, group: Any) -> list[str]:
    """The markdown lines of one command: heading, usage, help text, parameter table."""
    ctx = type(group).context_class(command, info_name=name)
    usage = " ".join(["tuner", name, *command.collect_usage_pieces(ctx)])
    lines = [f"## tuner {name}", "", "```text", usage, "```", ""]
    if command.help:
        lines += [command.help.strip(), ""]
    rows = [row for p in command.params if (row := _param_row(p, ctx)) is not None]
    if rows:
        lines += ["| flag | type | default | help |", "| --- | --- | --- | --- |", *rows, ""]
    return lines


def render() -> str:
    """The whole CLI reference as markdown, commands in alphabetical order."""
    group = typer.main.get_command(app)
    lines = [HEADER]
    if group.help:
        lines += [f"`tuner`: {group.help.strip()}", ""]
    commands: dict[str, Any] = getattr(group, "commands", {})
    lines += ["Commands: " + ", ".join(f"[`{n}`](#tuner-{n})" for n in sorted(commands)), ""]
    for name in sorted(commands):
        lines += _command_section(name, commands[name], group)
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    """Rewrite docs/cli.md, or with --check say whether it is current."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--check", action="store_true", help="exit 1 when the file is stale")
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        current = args.out.read_text() if args.out.is_file() else ""
        if current != text:
            print(f"{args.out} is stale: run `{COMMAND}`", file=sys.stderr)
            return 1
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
