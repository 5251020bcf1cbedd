"""What an exporter produces: files to write, the launch command, and caveats for the user."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["EngineExport", "shell_join"]


@dataclass(frozen=True)
class EngineExport:
    """One engine's launch recipe for one EngineConfig."""

    engine: str
    version: str
    command: str
    files: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def readme(self) -> str:
        """Plain-text summary: the command, then each caveat on its own line."""
        lines = [f"# {self.engine} {self.version}", "", self.command, ""]
        lines += [f"NOTE: {n}" for n in self.notes]
        return "\n".join(lines).rstrip() + "\n"


def shell_join(argv: list[str]) -> str:
    """A copy-pasteable shell command line, one `--flag value` pair per continued line."""
    import shlex

    parts: list[str] = []
    for token in argv:
        quoted = shlex.quote(token)
        if token.startswith("--") or not parts:
            parts.append(quoted)
        else:
            parts[-1] = f"{parts[-1]} {quoted}"
    return " \\\n    ".join(parts)
