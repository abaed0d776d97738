"""The shard glob, matched in time linear in the name: no backtracking, whatever the pattern.

The syntax (relative POSIX names): ``*`` any run of characters within one directory, ``?`` one character other than
``/``, ``[...]`` a character class as ``fnmatch`` reads it (``[!...]`` negates, ``]`` first is literal, ``a-z`` a
range, a reversed range matches nothing, ``[`` without a closing ``]`` is literal), ``**`` any run of characters
across directories, ``**/`` any number of leading directories (including none). On a name without ``/`` this is
``fnmatch.fnmatchcase``; unlike ``fnmatch``, no wildcard or class ever matches ``/`` except ``**``.

Why not ``fnmatch.translate`` or a regular expression: Python's ``re`` backtracks, and a pattern with k stars such
as ``*a*a*a*a*a*b`` against a name of n ``a`` costs about n**(k-1) steps (minutes for a 40-character name); the agent
runs the glob over every file name before it binds its socket, so one DatasetCache could keep an agent from ever
serving. Here the pattern becomes a small NFA (one state per token) run as a set of states, with the transitions of
(state set, character) computed once and remembered, as RE2 does: each character of a name costs one table lookup,
at worst O(len(pattern)) for a transition not seen before, so a name costs O(len(name) * len(pattern)) at most.
The table is bounded (``_MAX_TRANSITIONS``, then cleared), so memory is too.
"""

from __future__ import annotations

# Token kinds. A state is the index of the next token to match; state len(tokens) accepts.
_ONE = 0  # consume one character in the set -> next state
_LOOP = 1  # consume any number of characters in the set (stay), or none (epsilon -> next)
_SPLIT = 2  # ``**/`` = (.*/)? : epsilon -> next (the loop and its '/') or -> next + 3 (skip them)

_MAX_TRANSITIONS = 4096


class _Chars:
    """A set of characters: ``ranges`` (inclusive code point pairs), negated or not; ``/`` excluded unless
    ``slash``."""

    __slots__ = ("ranges", "negated", "slash")

    def __init__(self, ranges: tuple[tuple[int, int], ...], negated: bool = False, slash: bool = False):
        self.ranges, self.negated, self.slash = ranges, negated, slash

    def __contains__(self, char: str) -> bool:
        if char == "/":
            return self.slash
        code = ord(char)
        return any(lo <= code <= hi for lo, hi in self.ranges) != self.negated


_ANY = _Chars((), negated=True, slash=True)
_ANY_BUT_SLASH = _Chars((), negated=True)


def _literal(char: str) -> _Chars:
    return _Chars(((ord(char), ord(char)),), slash=char == "/")


def _class(pattern: str, start: int) -> tuple[_Chars, int] | None:
    """The class opening at ``pattern[start] == '['`` and the index after it; None when it never closes (then
    ``[`` is a literal), as ``fnmatch`` reads it."""
    j = start + 1
    negated = j < len(pattern) and pattern[j] == "!"
    if negated:
        j += 1
    body_start = j
    if j < len(pattern) and pattern[j] == "]":
        j += 1
    end = pattern.find("]", j)
    if end < 0:
        return None
    body = pattern[body_start:end]
    ranges: list[tuple[int, int]] = []
    k = 0
    while k < len(body):
        if k + 2 < len(body) and body[k + 1] == "-":
            lo, hi = ord(body[k]), ord(body[k + 2])
            if lo <= hi:  # a reversed range matches nothing, as in fnmatch
                ranges.append((lo, hi))
            k += 3
        else:
            ranges.append((ord(body[k]), ord(body[k])))
            k += 1
    return _Chars(tuple(ranges), negated=negated), end + 1


def _tokens(pattern: str) -> list[tuple[int, _Chars | None]]:
    tokens: list[tuple[int, _Chars | None]] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            tokens += [(_SPLIT, None), (_LOOP, _ANY), (_ONE, _literal("/"))]
            i += 3
        elif pattern.startswith("**", i):
            tokens.append((_LOOP, _ANY))
            i += 2
        elif pattern[i] == "*":
            tokens.append((_LOOP, _ANY_BUT_SLASH))
            i += 1
        elif pattern[i] == "?":
            tokens.append((_ONE, _ANY_BUT_SLASH))
            i += 1
        elif pattern[i] == "[" and (parsed := _class(pattern, i)) is not None:
            chars, i = parsed
            tokens.append((_ONE, chars))
        else:
            tokens.append((_ONE, _literal(pattern[i])))
            i += 1
    return tokens


class ShardGlob:
    """A compiled shard glob; ``match(name)`` says whether the whole of ``name`` matches."""

    __slots__ = ("pattern", "_tokens", "_next1", "_next3", "_accept", "_start", "_steps", "_char_masks")

    def __init__(self, pattern: str):
        self.pattern = pattern
        self._tokens = _tokens(pattern)
        # Bit i of a state set: state i. Epsilon moves as masks: states that may move on by one / by three.
        self._next1 = sum(1 << i for i, (kind, _) in enumerate(self._tokens) if kind in (_LOOP, _SPLIT))
        self._next3 = sum(1 << i for i, (kind, _) in enumerate(self._tokens) if kind == _SPLIT)
        self._accept = 1 << len(self._tokens)
        self._start = self._closure(1)
        self._steps: dict[tuple[int, str], int] = {}
        self._char_masks: dict[str, tuple[int, int]] = {}

    def _closure(self, states: int) -> int:
        """``states`` plus every state reachable from them by epsilon moves (at most one pass per token)."""
        while True:
            grown = states | ((states & self._next1) << 1) | ((states & self._next3) << 3)
            if grown == states:
                return states
            states = grown

    def _masks(self, char: str) -> tuple[int, int]:
        """(states whose token consumes ``char`` and moves on, loop states that consume it and stay)."""
        masks = self._char_masks.get(char)
        if masks is None:
            advance = stay = 0
            for i, (kind, chars) in enumerate(self._tokens):
                if chars is not None and char in chars:
                    if kind == _ONE:
                        advance |= 1 << i
                    else:
                        stay |= 1 << i
            masks = self._char_masks[char] = (advance, stay)
        return masks

    def _step(self, states: int, char: str) -> int:
        advance, stay = self._masks(char)
        following = self._closure(((states & advance) << 1) | (states & stay))
        if len(self._steps) >= _MAX_TRANSITIONS:
            self._steps.clear()
        self._steps[(states, char)] = following
        return following

    def match(self, name: str) -> bool:
        states = self._start
        steps = self._steps
        for char in name:
            following = steps.get((states, char))
            states = self._step(states, char) if following is None else following
            if not states:
                return False
        return bool(states & self._accept)

    def __repr__(self) -> str:
        return f"ShardGlob({self.pattern!r})"
