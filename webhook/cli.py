"""The ``trainguard`` command.

Subcommands are discovered through the ``trainguard.commands`` entry-point group (see pyproject.toml): each
entry point is ``configure(parser) -> run``, where ``run(args) -> int`` is the exit status. Discovery keeps the
dependency direction: ``controller`` registers its own commands and ``webhook`` never imports it.
"""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import entry_points
from typing import Callable, Sequence

from trainguard.webhook import __version__

Run = Callable[[argparse.Namespace], int]

# Shown in this order in --help; anything else registered comes after, sorted.
_ORDER = ("webhook", "controller", "render", "test", "cache-agent", "version")


def configure_version(parser: argparse.ArgumentParser) -> Run:
    parser.description = "Print the trainguard version."

    def run(args: argparse.Namespace) -> int:
        print(f"trainguard {__version__}")
        return 0

    return run


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser with every subcommand; with ``command``, only that one's module is imported (the others are listed
    but not loaded), so ``trainguard cache-agent`` runs without the control plane's modules in its process."""
    parser = argparse.ArgumentParser(
        prog="trainguard",
        description="Admission webhooks, policy engine and reconciler for Kubeflow Trainer TrainJobs.",
    )
    parser.add_argument("--version", action="version", version=f"trainguard {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    found = {ep.name: ep for ep in entry_points(group="trainguard.commands")}
    for name in sorted(found, key=lambda n: (_ORDER.index(n) if n in _ORDER else len(_ORDER), n)):
        sp = sub.add_parser(name, help=_summary(found[name].value))
        if command is None or name == command:
            sp.set_defaults(run=found[name].load()(sp))
    return parser


def _summary(target: str) -> str:
    return {
        "trainguard.webhook.admission.main:configure": "serve the validating and mutating admission webhooks (HTTPS)",
        "trainguard.controller.reconcile.main:configure": "run the TrainJob reconciler",
        "trainguard.webhook.render:configure": "run admission and the JobSet build on files, offline",
        "trainguard.webhook.testbench:configure": "check expected policy results for TrainJobs, offline",
        "trainguard.cache.main:configure": "run the node-local dataset cache agent",
        "trainguard.webhook.cli:configure_version": "print the version",
    }.get(target, "")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # The first word that is not an option names the command (the global options take no value).
    command = next((word for word in argv if not word.startswith("-")), None)
    args = build_parser(command).parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
