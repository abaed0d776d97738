"""The open-files limit: the soft RLIMIT_NOFILE is often 1024 while the hard limit is far higher. Every connection,
watch and handed-over file descriptor needs one, so each command raises the soft limit to the hard one at start
(allowed unprivileged) and sizes itself by what it got."""

from __future__ import annotations

import logging
import resource
from dataclasses import dataclass

log = logging.getLogger("trainguard.process")


@dataclass(frozen=True)
class NofileLimits:
    soft_before: int
    soft: int
    hard: int


def raise_nofile_limit() -> NofileLimits:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    new = soft
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            new = target
        except (ValueError, OSError) as e:
            log.warning("cannot raise the open-files limit from %d to %d: %s", soft, target, e)
    return NofileLimits(soft, new, hard)
