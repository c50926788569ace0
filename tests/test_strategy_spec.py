"""The strategy and cache-state registries drive: keyword-only specs, every field read by code."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest

from racegate.harness.scenario.vocab import (
    CACHE_STATES,
    STRATEGIES,
    CacheState,
    CacheStateSpec,
    Strategy,
    StrategySpec,
)

ROOT = Path(__file__).resolve().parents[1]
CODE = list((ROOT / "racegate").rglob("*.py"))


def test_a_strategy_spec_takes_keywords_only() -> None:
    with pytest.raises(TypeError):
        StrategySpec(True, False, False, False, True, True, True, True)  # type: ignore[misc]


def test_every_strategy_spec_field_is_read_by_the_code() -> None:
    """A field only the registry sets is a flag nobody obeys: read as `.name` or selected with
    strategies_where(name=...) somewhere outside racegate/harness/scenario/vocab.py's definition.
    One test over all fields, not one per field: ids such as races_lazily would match `pytest -k
    race`."""
    vocab = (ROOT / "racegate" / "harness" / "scenario" / "vocab.py").read_text()
    unread = []
    for name in (f.name for f in fields(StrategySpec)):
        use = re.compile(rf"\.{name}\b|strategies_where\([^)]*\b{name}=")
        readers = [p for p in CODE if p.name != "vocab.py" and use.search(p.read_text())]
        in_vocab = re.search(rf"spec\.{name}\b|strategies_where\({name}=", vocab)
        if not (readers or in_vocab):
            unread.append(name)
    assert not unread, f"StrategySpec fields set in the registry but read nowhere: {unread}"


def test_the_locked_and_nested_fx_strategies_are_driven_by_their_spec() -> None:
    assert [s for s, spec in STRATEGIES.items() if spec.locked] == [Strategy.WARMUP_LOCKED]
    assert [s for s, spec in STRATEGIES.items() if spec.nested_fx_trace_off] == [
        Strategy.NESTED_FX_OFF
    ]
    assert [s for s, spec in STRATEGIES.items() if spec.one_process_per_worker] == [
        Strategy.PROCESSES
    ]


@pytest.mark.parametrize("name", [f.name for f in fields(CacheStateSpec)])
def test_every_cache_state_spec_field_is_read_by_the_code(name: str) -> None:
    """A cache state's branches read its spec (state.spec.<field>), never `state is X`."""
    use = re.compile(rf"\.spec\.{name}\b|self\.spec\.{name}\b")
    assert any(use.search(p.read_text()) for p in CODE), f"CacheStateSpec.{name} is read nowhere"


def test_no_code_branches_on_a_cache_state_by_name() -> None:
    by_name = re.compile(r"(is|==|!=) CacheState\.[A-Z]")
    found = [str(p.relative_to(ROOT)) for p in CODE if by_name.search(p.read_text())]
    assert not found, f"branch on a CacheStateSpec field instead: {found}"
    assert set(CACHE_STATES) == set(CacheState)
    with pytest.raises(TypeError):
        CacheStateSpec(True, False, False)  # type: ignore[misc]
