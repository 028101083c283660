"""The generative study's pieces: constraints (hostile strings refused), dedup, filtering,
ranking, and the planner over real storage (SQLite) with results written through the lease.

The full loop with real training on local Ray is ``test_generate_study.py``; here trial results
are written directly (a known fitness per candidate), so evolution's bookkeeping is checked in
seconds: lineage, aging population, restart without re-deciding.
"""

from __future__ import annotations

import random

import optuna
import pytest

from normfree.search_space import catalog, parse
from normfree.specs import NormSpec, StudySpec, TrialResult
from normfree.workers.execution import TrialStore
from normfree.workers.generate import (
    Constraint,
    ConstraintError,
    GenerateOptions,
    GenerativePlanner,
    Individual,
    Seen,
    generated_name,
    load_records,
    run_generation,
    summarize_records,
    validate_spec,
)

# ------------------------------------------------------------------------------ constraints


@pytest.mark.parametrize(
    ("text", "name", "expected"),
    [
        ("bounded and monotone", "erf", True),
        ("bounded and monotone", "sin", False),
        ("bounded and monotone", "logsign", False),
        ("Bounded AND (odd or zero_centred)", "tanh", True),
        ("not bounded", "logsign", True),
        ("growth == logarithmic", "logsign", True),
        ("growth in (bounded, 'sub-linear power')", "power23", True),
        ("growth in (bounded, logarithmic)", "linear", False),
        ("slope0 >= 1.0 and slope0 < 1.2", "erf", True),  # erf'(0) = 2/sqrt(pi) = 1.128
        ("monotone != neither", "dampx", False),
        ("increasing and smooth", "tanh", True),
        ("smooth", "linearclip", False),
        ("flat_centre", "erf", False),
        ("range_max <= 1", "tanh", True),
        ("range_max <= 1", "linear", False),  # unbounded: range_max is None, never <= 1
        ("limit_pos == 1", "tanh", True),
        ("not not odd", "erf", True),
    ],
)
def test_constraints_evaluate_on_catalog_properties(text: str, name: str, expected: bool) -> None:
    assert Constraint(text)(catalog.get(name).properties) is expected


@pytest.mark.parametrize(
    "text",
    [
        "__import__('os').system('true')",
        "bounded and ().__class__",
        "bounded; import os",
        "lambda: bounded",
        "[x for x in bounded]",
        "f'{bounded}'",
        "bounded.real",
        "exec('1')",
        "eval",
        "bounded and",
        "and bounded",
        "(bounded",
        "bounded)",
        "",
        "   ",
        "bounded == 3",
        "slope0 > fast",
        "growth == quadratic",
        "monotone < increasing",
        "slope0 in (1, 2)",
        "growth in bounded",
        "slope0 > 1e999",
        "'unterminated",
        "bounded " * 200,
        "(" * 50 + "bounded" + ")" * 50,
        "not " * 40 + "bounded",
        "bounded\x00",
        "bоunded",  # Cyrillic o
    ],
)
def test_hostile_or_malformed_constraints_are_refused(text: str) -> None:
    with pytest.raises(ConstraintError) as info:
        Constraint(text)
    assert info.value.message


def test_constraint_explains_a_rejection() -> None:
    c = Constraint("bounded and monotone")
    why = c.explain(catalog.get("sin").properties)
    assert "monotone='neither'" in why and "bounded=True" in why


# ------------------------------------------------------------------------------ options


def test_options_are_validated() -> None:
    spec = StudySpec(kind="generate", proxy="vit-tiny", seeds=1, params={"population": 0})
    with pytest.raises(ValueError, match="population"):
        validate_spec(spec)
    spec = StudySpec(kind="generate", proxy="vit-tiny", params={"constraints": "bounded or"})
    with pytest.raises(ConstraintError):
        validate_spec(spec)
    spec = StudySpec(kind="generate", proxy="nope")
    with pytest.raises(ValueError, match="unknown proxy"):
        validate_spec(spec)
    spec = StudySpec(kind="generate", proxy="vit-tiny", functions=["layernorm"])
    with pytest.raises(ValueError, match="baseline"):
        validate_spec(spec)
    ok = StudySpec(kind="generate", proxy="vit-tiny", params={"population": 4, "generations": 2})
    assert validate_spec(ok).n_children(1) == 2


# ------------------------------------------------------------------------------ one generation


def _ratio_by_length(norm: NormSpec) -> dict:
    """A deterministic stand-in score: shorter formulas rank first."""
    return {"survives": True, "loss_ratio": len(norm.formula or "") / 100.0}


def test_seen_dedups_by_canonical_and_fingerprint() -> None:
    seen = Seen(catalog.all())
    assert seen.match(parse("2*sigmoid(2*u) - 1")) == "tanh"  # canonical (after rewriting)
    assert seen.match(parse("u/(1+abs(u))")) == "smoothsign"
    assert seen.match(parse("erf(u + 0.1)")) is None
    new = parse("tanh(u)*exp(-u^2) + u/(2+abs(u))")
    seen.add(new.canonical, new.fingerprint, generated_name(new))
    same_behaviour = parse("u/(2+abs(u)) + exp(-u^2)*tanh(u)")
    assert seen.match(same_behaviour) == generated_name(new)


def test_a_generation_filters_dedups_and_ranks_before_training() -> None:
    opts = GenerateOptions(population=3, constraints="bounded and monotone", max_prescreen=5)
    seen = Seen(catalog.all())
    calls: list[str] = []

    def screen(norm: NormSpec) -> dict:
        calls.append(norm.name)
        return _ratio_by_length(norm)

    record, chosen = run_generation(0, [], seen, opts, prescreen_fn=screen, rng=random.Random(0))
    verdicts = [p["verdict"] for p in record.proposals]
    assert len(chosen) == 3 and verdicts.count("train") == 3
    assert "duplicate" in verdicts and "constraint" in verdicts
    # only filter survivors were prescreened, at most the budget, and the best 3 trained
    screened = [p for p in record.proposals if "prescreen" in p]
    assert len(calls) == len(screened) == 5
    scores = sorted(p["score"] for p in screened)
    assert sorted(p["score"] for p in record.proposals if p["verdict"] == "train") == scores[:3]
    for c in chosen.values():  # every trained candidate satisfies the constraint
        assert c.properties.bounded and c.properties.monotone in ("increasing", "decreasing")
    # nothing trained is a duplicate of anything else trained or of the catalog
    fps = [c.fingerprint for c in chosen.values()]
    assert len(set(fps)) == 3 and all(Seen(catalog.all()).match(c) is None for c in chosen.values())
    summary = summarize_records([record])
    assert summary["rejected_before_training"] == len(record.proposals) - 3
    assert 0 < summary["fraction_rejected"] < 1


def test_prescreen_failures_are_rejected_not_trained() -> None:
    opts = GenerateOptions(population=2, max_prescreen=4)

    def screen(norm: NormSpec) -> dict:
        if "erf" in (norm.formula or ""):
            raise RuntimeError("operator exploded")
        return {"survives": False, "loss_ratio": None}

    record, chosen = run_generation(
        0, [], Seen(catalog.all()), opts, prescreen_fn=screen, rng=random.Random(1)
    )
    assert chosen == {}
    assert {p["verdict"] for p in record.proposals if "prescreen" in p} == {"prescreen"}


def test_children_come_from_the_population_with_lineage() -> None:
    opts = GenerateOptions(population=2, children=3, p_crossover=0.5)
    pop = [
        Individual("erf", catalog.get("erf").expr, 0, 0.9),
        Individual("tanh", catalog.get("tanh").expr, 0, 0.8),
    ]
    record, _ = run_generation(
        1, pop, Seen(catalog.all()), opts, prescreen_fn=None, rng=random.Random(2)
    )
    trained = [p for p in record.proposals if p["verdict"] == "train"]
    assert len(trained) == 3
    for p in record.proposals:
        if p["verdict"] != "invalid" or p.get("formula"):
            assert p["parents"] and set(p["parents"]) <= {"erf", "tanh"}
            assert p["mutation"] in ("point", "subtree", "constant", "wrap", "shrink", "crossover")


# ------------------------------------------------------------------------------ the planner


def _finish_all(store: TrialStore, study_id: int, fitness) -> int:
    """Lease every waiting trial and write a result whose value is ``fitness(candidate)``."""
    n = 0
    while (leased := store.repo.lease_next(study_id, "test", 60)) is not None:
        value = fitness(leased.config.norm)
        result = TrialResult(
            status="complete", metrics={"val_acc": value}, objective="val_acc", total_time_s=2.0
        )
        assert store.repo.finish_trial(leased.id, "test", leased.attempt, result)
        n += 1
    return n


@pytest.fixture
def store(tmp_path) -> TrialStore:
    """A migrated SQLite store of the test's own."""
    trials = TrialStore(f"sqlite:///{tmp_path / 'gen.db'}")
    trials.migrate()
    return trials


def test_planner_evolves_records_lineage_and_restarts_without_redeciding(store: TrialStore) -> None:
    spec = StudySpec(
        kind="generate",
        proxy="vit-tiny",
        seeds=2,
        functions=["erf", "tanh"],
        baselines=["layernorm"],
        epochs=1,
        params={"generations": 2, "population": 3, "children": 2, "constraints": "bounded"},
    )
    study_id = store.repo.create_study(spec)
    ostudy = optuna.create_study(
        study_name=f"normfree-study-{study_id}", storage=store.optuna_storage()
    )

    def planner() -> GenerativePlanner:
        return GenerativePlanner(spec, study_id, store, ostudy, prescreen_fn=_ratio_by_length)

    def fitness(norm: NormSpec) -> float:
        return 0.5 + 0.01 * len(norm.formula or norm.name)

    # generation 0: the two seed functions and the baseline, two paired seeds each
    assert planner().next_generation() == 6
    assert planner().next_generation() == 0  # nothing new while generation 0 is open
    assert _finish_all(store, study_id, fitness) == 6
    # generation 1; then "crash" after the record, before the trials: delete them
    p = planner()
    added = p.next_generation()
    assert added == 4  # 2 children x 2 seeds
    records = load_records(ostudy)
    assert [r.generation for r in records] == [0, 1]
    gen1 = [x["name"] for x in records[1].trained]
    rows = store.repo.list_trials(study_id)
    with store.db.session() as s:
        from sqlalchemy import delete

        from normfree.storage.models import TrialRow

        s.execute(delete(TrialRow).where(TrialRow.candidate.in_(gen1)))
    assert planner().next_generation() == 4  # re-inserted from the record, not re-decided
    assert [x["name"] for x in load_records(ostudy)[1].trained] == gen1
    assert len(load_records(ostudy)) == 2
    assert {r["candidate"] for r in store.repo.list_trials(study_id)} == {
        r["candidate"] for r in rows
    }
    _finish_all(store, study_id, fitness)
    assert planner().next_generation() == 4  # generation 2
    _finish_all(store, study_id, fitness)
    assert planner().next_generation() == 0  # done: generations 0..2

    records = load_records(ostudy)
    trained = [x for r in records[1:] for x in r.trained]
    assert len(trained) == 4 and len({x["name"] for x in trained}) == 4
    for x in trained:
        row = store.repo.get_candidate(x["name"])
        assert row["group"] == "generated" and row["properties"]["bounded"]
        lin = row["lineage"]
        assert lin["parents"] and lin["mutation"] and lin["study_id"] == study_id
        assert lin["generation"] in (1, 2) and lin["formula"] == row["formula"]
        parse(row["formula"])  # what was stored is a valid formula
    # generation 2's parents come from the (aging) population of generations 0-1
    gen2_parents = {q for x in records[2].trained for q in x["parents"]}
    assert gen2_parents <= {"erf", "tanh", *gen1}
    board = store.repo.leaderboard("vit-tiny", study_id=study_id)
    assert {r["candidate"] for r in board} >= {x["name"] for x in trained} | {"erf", "layernorm"}
    assert all(r["n"] == 2 for r in board)


# ------------------------------------------------------------------ bounded and stoppable (#28)


def test_a_generation_stops_at_its_planning_seconds() -> None:
    """The estimate counts proposals and prescreens; a generation never spends past it."""
    opts = GenerateOptions(population=2, max_proposals=100_000)
    assert opts.planning_seconds(1) >= 100_000 * 0.5
    pop = [Individual("erf", catalog.get("erf").expr, 0, 0.9)]
    record, chosen = run_generation(
        1, pop, Seen(catalog.all()), opts, prescreen_fn=None, rng=random.Random(3), seconds=0.0
    )
    assert record.proposals == [] and chosen == {}
    # a small budget: some proposals, far fewer than asked
    record, _ = run_generation(
        1, pop, Seen(catalog.all()), opts, prescreen_fn=None, rng=random.Random(3), seconds=0.5
    )
    assert 0 < len(record.proposals) < 1000


def test_a_cancel_stops_the_proposal_loop(store: TrialStore) -> None:
    """Issue 28: ``generations: 1000, population: 1, max_proposals: 100000`` kept proposing
    after a cancel. Now the planner reads the study's status while it proposes and stops."""
    import threading
    import time

    from normfree.workers.evolution import GenerationStopped

    spec = StudySpec(
        kind="generate",
        proxy="vit-tiny",
        seeds=1,
        functions=["erf"],
        epochs=1,
        params={"generations": 1000, "population": 1, "max_proposals": 100_000},
    )
    study_id = store.repo.create_study(spec)
    ostudy = optuna.create_study(
        study_name=f"normfree-study-{study_id}", storage=store.optuna_storage()
    )
    planner = GenerativePlanner(spec, study_id, store, ostudy, prescreen_fn=None)
    assert planner.next_generation() == 1  # generation 0: erf
    _finish_all(store, study_id, lambda norm: 0.5)
    # every child a duplicate: the planner would propose forever, generation after generation
    seen_calls = []
    real_seen = planner._seen

    def all_seen(records):
        seen = real_seen(records)
        seen.match = lambda cand: seen_calls.append(1) or "erf"  # type: ignore[method-assign]
        return seen

    planner._seen = all_seen  # type: ignore[method-assign]
    out: list[int] = []
    worker = threading.Thread(target=lambda: out.append(planner.next_generation()), daemon=True)
    worker.start()
    time.sleep(1.0)
    assert worker.is_alive() and seen_calls  # proposing
    t0 = time.monotonic()
    store.repo.set_study_status(study_id, "cancelled")
    worker.join(30)
    assert not worker.is_alive(), "the proposal loop kept running after the cancel"
    assert time.monotonic() - t0 < 5.0 and out == [0]
    assert issubclass(GenerationStopped, Exception)
