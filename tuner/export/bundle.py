"""What an exporter produces: files to write, the launch command, and caveats for the user."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["EngineExport", "draft_source", "shell_join"]


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


def draft_source(draft_model: str) -> str:
    """A draft named in the catalog is served from its Hugging Face id; anything else is a path."""
    from tuner.catalog import list_names, load_model

    if draft_model in list_names("models"):
        return load_model(draft_model).hf_id or draft_model
    return draft_model
