"""Issue 33 item 7: text a server sends (its model ids, error bodies, log lines) reaches the
terminal with its control characters escaped, never as raw escape sequences.

One helper, `tuner.errors.printable`, escapes them; the CLI's printers (`say`, `print_error`,
`print_note`, `print_rows`, `cell`), the error bodies (`body_message`), the failure summary of a
benchmark and the vLLM backend's reasons use it.
"""

from __future__ import annotations

import json

import pytest
from _fake_openai import FakeServerConfig, running_fake_server
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from tuner.bench.messages import body_message
from tuner.bench.stats import RequestResult, summarize_failures
from tuner.cli import app
from tuner.cli.output import print_error, print_note, print_rows, say
from tuner.errors import control_reason, one_line, printable

runner = CliRunner()
# Clears the screen, retitles the window and rings the bell: what a hostile server could send.
EVIL = "m\x1b[2J\x1b]0;pwned\x07\u202e\r"
RAW = ("\x1b", "\x07", "\u202e", "\r")
ERROR_BODY = json.dumps({"error": {"message": EVIL}})  # an OpenAI error body carrying it


def _clean(text: str) -> bool:
    """No raw control character of EVIL's in `text`, and each shown as its escape."""
    return not any(c in text for c in RAW) and "\\x1b[2J" in text and "\\u202e" in text


@pytest.mark.unit
def test_printable_escapes_controls_and_keeps_everything_else() -> None:
    assert printable("meta-llama/Llama-3 [x] é 日本 \xa0") == "meta-llama/Llama-3 [x] é 日本 \xa0"
    assert printable(EVIL) == "m\\x1b[2J\\x1b]0;pwned\\x07\\u202e\\r"
    assert printable("a\nb\tc\x1b", "\n\t") == "a\nb\tc\\x1b"
    assert printable("\u2028\x85\ufeff") == "\\u2028\\x85\\ufeff"


@pytest.mark.unit
@given(st.text(), st.sampled_from(["", "\n", "\n\t"]))
def test_printable_leaves_no_control_character_but_those_kept(text: str, keep: str) -> None:
    shown = printable(text, keep)
    assert control_reason(shown.translate({ord(c): None for c in keep})) is None
    assert printable(shown, keep) == shown  # escaping twice changes nothing
    if control_reason(text) is None:
        assert shown == text


@pytest.mark.unit
def test_error_bodies_and_failure_summaries_are_escaped() -> None:
    assert _clean(body_message(ERROR_BODY))
    assert _clean(body_message(EVIL + " plain body"))
    failed = [RequestResult(input_tokens=1, requested_output_tokens=1, error=f"HTTP 500: {EVIL}")]
    assert _clean(summarize_failures(failed))
    assert _clean(one_line(f"server said {EVIL}"))


@pytest.mark.unit
def test_the_cli_printers_escape_controls(capsys: pytest.CaptureFixture[str]) -> None:
    say(f"served {EVIL}\nsecond line")
    print_rows(f"title {EVIL}", ["model", "n"], [[EVIL, "1"]])
    print_error(f"cannot use {EVIL}")
    print_note(f"note {EVIL}")
    out, err = capsys.readouterr()
    assert _clean(out) and _clean(err)
    assert "\nsecond line" in out  # a multi-line block keeps its lines


def test_bench_shows_a_hostile_model_id_escaped() -> None:
    with running_fake_server(FakeServerConfig(model=EVIL, ttft_s=0.01, itl_s=0.005)) as server:
        result = runner.invoke(app, ["bench", "--url", server.url, "--isl", "8", "--osl", "3",
                                     "--num-requests", "2", "--concurrency", "1"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert _clean(result.output)


def test_bench_error_bodies_and_served_ids_are_escaped() -> None:
    config = FakeServerConfig(model=EVIL, raw_data=(ERROR_BODY,), ttft_s=0.01, itl_s=0.005)
    with running_fake_server(config) as server:
        failed = runner.invoke(app, ["bench", "--url", server.url, "--isl", "8", "--osl", "3",
                                     "--num-requests", "2", "--concurrency", "1"])  # fmt: skip
        unknown = runner.invoke(app, ["bench", "--url", server.url, "--model", "other",
                                      "--num-requests", "1"])  # fmt: skip
    assert failed.exit_code == 4, failed.output
    assert _clean(failed.output) and "server error" in failed.output
    assert unknown.exit_code == 4 and _clean(unknown.output) and "served:" in unknown.output
