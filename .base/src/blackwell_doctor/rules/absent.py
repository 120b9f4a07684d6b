"""Families whose every check first reads one section of the facts, and skips in the same
words when the facts lack it (no collective test, no logs, no ``--model-dir``, no
``--bench``, no ``--stack``).

The engine of every check (:func:`~blackwell_doctor.rules.evaluate.default_engine`) decides
those skips from this table without importing the family's module: a ``check`` without those
inputs does not load their code and data (start-up: docs/performance.md). The family's own
code says the same through these constants; tests/test_engine.py runs each check of these
families on facts without the section and compares.
"""

NO_COLLECTIVE = "the collective test is not in these facts (collect runs it with its probes)"
NO_LOGS = "no logs given (--logs, --container, --journal, --kernel-log)"
NO_MODEL = "no model directory given (--model-dir)"
NO_BENCH = "no bench results given (--bench run.json)"
NOT_AUDITED = "the Python GPU stack was not audited (--stack)"
NO_HEALTH = "hardware health is not in these facts (collected before issue 39)"

# family -> (the attribute of Facts its checks read first, the skip's summary)
SECTIONS: dict[str, tuple[str, str]] = {
    "collective": ("collective", NO_COLLECTIVE),
    "health": ("health", NO_HEALTH),
    "logs": ("logs", NO_LOGS),
    "model": ("model", NO_MODEL),
    "serving": ("bench", NO_BENCH),
    "stack": ("stack", NOT_AUDITED),
}
