"""The `alignment` suite: brand voice (authenticity), safety and stability of sessions.

The streaming worker uses it through `streaming.AlignmentSessions` (the registry's
session suite). Every function below takes the `alignment` section (`settings` here),
not the whole `Settings`. Load once per process (`embedding_model`, `personas`,
`safety_files`)::

    embedder = embedder_from_settings(settings)   # alignment.embedding: onnx or torch
    catalog = PersonaCatalog.from_settings(settings, embedder)   # personas, vectors cached
    patterns = patterns_from_settings(settings)                  # safety patterns, cached

then per micro-batch: `vectors = embedder.encode(texts)` (in an executor), and per turn
(`scoring`) `score_turn(text, catalog.get(persona_id), vector, settings, patterns)`, `turn_scored`,
`SessionState.add(turn_index, turn, vector, text, final, now, user=...)` (the user message
too, so that the judge sees the same conversation as offline), and on close
`verdict = await judge.judge(session_transcript(state))` when a judge is configured,
`score_session(state, settings, verdict.score)` and `with_verdict(scored, verdict,
on_error)` (an unusable verdict recorded, the label at least Review on `review`).

Layout (as every suite): `spec.py` (what the registry knows), `settings.py` (its
configuration section), `scoring.py` (pure), `aggregate.py`, `report.py`, `render.py`
(console and Markdown), `batch.py` (`scorestream score`); at its edge,
`embedding_model.py` / `onnx_minilm.py` (the model), `judge_client.py` (the HTTP judge;
its protocol, pure: `judge_verdict.py`),
`personas.py` and `safety_files.py` (YAML files), `streaming.py` (its `SessionSuite`).

The package imports none of its modules: the registry imports `spec` through it, and
listing the suites (every command's `--help`, a worker without alignment) must not load
the scorers, the classifiers or the judge's HTTP client. Import each from its module.
"""
