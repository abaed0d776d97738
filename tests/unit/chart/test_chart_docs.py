"""The chart README's values table is generated from values.yaml's comments (hack/gen_chart_docs.py) and current."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "hack"))

import gen_chart_docs  # noqa: E402
from gen_chart_docs import Row, render_readme, rows  # noqa: E402

SAMPLE = textwrap.dedent("""\
    # A file preamble, not attached to the next key (a blank line follows).

    # The webhook.
    webhook:
      # Replicas that serve.
      # Two lines of comment.
      replicas: 2
      port: 9443
      # Fail or Ignore.
      failurePolicy: Fail
      certificates:
        mode: selfSigned
      empty: {}
    # Lists | and pipes.
    policies: [{name: a, spec: {}}]
    """)


@pytest.mark.parametrize("row", [
    Row("webhook", "object", "", "The webhook."),
    Row("webhook.replicas", "int", "2", "Replicas that serve. Two lines of comment."),
    Row("webhook.port", "int", "9443", ""),
    Row("webhook.failurePolicy", "string", '"Fail"', "Fail or Ignore."),
    Row("webhook.certificates", "object", "", ""),
    Row("webhook.certificates.mode", "string", '"selfSigned"', ""),
    Row("webhook.empty", "object", "{}", ""),
    Row("policies", "list", '[{"name": "a", "spec": {}}]', "Lists | and pipes."),
], ids=lambda r: r.path)
def test_rows_take_the_comment_block_above_each_key(row: Row) -> None:
    assert row in rows(SAMPLE)


def test_rows_follow_file_order() -> None:
    assert [r.path for r in rows(SAMPLE)] == [
        "webhook", "webhook.replicas", "webhook.port", "webhook.failurePolicy", "webhook.certificates",
        "webhook.certificates.mode", "webhook.empty", "policies"]


def test_pipes_are_escaped_in_the_table() -> None:
    table = gen_chart_docs.table(SAMPLE)
    assert "| `policies` | list | " in table and "Lists \\| and pipes." in table


def test_a_changed_comment_changes_the_readme() -> None:
    readme = f"# chart\n\n{gen_chart_docs.BEGIN}\n{gen_chart_docs.END}\n\ntail\n"
    current = render_readme(readme, SAMPLE)
    assert render_readme(current, SAMPLE) == current  # regenerating is stable
    assert render_readme(current, SAMPLE.replace("Fail or Ignore.", "Fail, or Ignore.")) != current
    assert current.endswith(f"{gen_chart_docs.END}\n\ntail\n")


def test_every_value_is_described_by_its_comment_or_its_section() -> None:
    described = {r.path: r.description for r in rows(gen_chart_docs.VALUES.read_text())}
    missing = [p for p in described
               if not any(described.get(".".join(p.split(".")[:i])) for i in range(1, p.count(".") + 2))]
    assert missing == [], f"values.yaml keys without a comment (theirs or a section's): {missing}"


def test_checked_in_readme_is_current() -> None:
    proc = subprocess.run([sys.executable, str(REPO / "hack" / "gen_chart_docs.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
