"""Write docs/cli.md, the CLI reference, from the Typer app itself.

    python scripts/cli_reference.py            # rewrite docs/cli.md
    python scripts/cli_reference.py --check    # exit 1 when docs/cli.md is stale

Every command of `tuner.cli.app` with its help text, its usage line and a table of its
arguments and options (flag, type, help with the default and range click shows in `--help`).
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


def _param_row(param: Any, ctx: Any) -> str | None:
    """One table row for an option or argument; None for hidden ones."""
    if getattr(param, "hidden", False):
        return None
    if param.param_type_name == "argument":
        name = param.name.upper()
        help_text = getattr(param, "help", None) or ""
        need = "required" if param.required else "optional"
        return f"| `{_cell(name)}` | argument, {need}; {_cell(help_text)} |"
    record = param.get_help_record(ctx)
    if record is None:
        return None
    flags, help_text = record
    return f"| `{_cell(flags)}` | {_cell(help_text)} |"


def _command_section(name: str, command: Any, group: Any) -> list[str]:
    """The markdown lines of one command: heading, usage, help text, parameter table."""
    ctx = type(group).context_class(command, info_name=name)
    usage = " ".join(["tuner", name, *command.collect_usage_pieces(ctx)])
    lines = [f"## tuner {name}", "", "```text", usage, "```", ""]
    if command.help:
        lines += [command.help.strip(), ""]
    rows = [row for p in command.params if (row := _param_row(p, ctx)) is not None]
    if rows:
        lines += ["| flag | help |", "| --- | --- |", *rows, ""]
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
