"""Attack tests of the security model (issue 10): a package, so their module names never collide with unit tests of the same topic."""
