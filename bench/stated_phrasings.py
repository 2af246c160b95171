"""The deterministic extraction of stated state (``context/stated/extract.py``) scored per category, on
phrasings of our own as well as the peer kit's (issue 34 item 5: "score extraction also on phrasings of
your own, not only the kit's").

``PHRASINGS``: eight statements a category, as users write them without the kit's labels (``SAFETY RULE:``
…), and eight sentences that state nothing binding (questions, status reports, thanks, "never mind"), which
must be left alone. ``tests/unit/test_stated_phrasings.py`` holds the pass to every row.

Run: ``.venv/bin/python bench/stated_phrasings.py``. Per category: how many of our phrasings the pass
recognises as that category (and how many it reads as another), then the same for the kit's canaries
(``compaction-conformance-kit``'s seeded session, its randomized corpus and its generated corpus with
rotating paraphrases, seeds 1-4): each canary's statement is extracted as one item of its type.

``BEYOND``: two statements a category that the pass's patterns do not read, each with a paraphrase, read by
the optional model pass (``context/stated/model_pass.py``, docs/STATE.md "The model pass") over a scripted
model's answer: each statement copied verbatim, its paraphrase, and an item the user never said. This shows
what the strict reading keeps (the user's words, as the model classified them) and rejects (any other
wording), not what a real model finds: that needs a model (docs/STATE.md "What is not done here").
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

# Run as a script, this file's folder leads sys.path (its sibling compaction_kit.py would shadow the kit).
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import json  # noqa: E402

from vak_context.context.stated.extract import extract  # noqa: E402
from vak_context.context.stated.model_pass import read_answer  # noqa: E402

# category -> statements (None: sentences that state nothing binding).
PHRASINGS: dict[str | None, tuple[str, ...]] = {
    "rule": (
        "Never force-push to the release branch.",
        "Don't touch anything under vendor/.",
        "You must not delete customer records, even in staging.",
        "Always run the linter before you commit.",
        "Secrets are never to be printed in logs.",
        "Under no circumstances email the beta list.",
        "Make sure every migration has a down step.",
        "Writing to the production bucket is strictly forbidden.",
    ),
    "constraint": (
        "The budget for this sprint is $2,400.",
        "Keep the answer under 200 words.",
        "Use at most 3 retries per request.",
        "It has to be done by Thursday noon.",
        "The deadline moved to March 3.",
        "Only use the standard library.",
        "Don't spend more than €50 on API calls.",
        "No more than 4 files may change in one PR.",
    ),
    "goal": (
        "My goal is to cut the p95 latency of /search below 80 ms.",
        "We're trying to migrate the billing service off MySQL.",
        "The next step is wiring the retry queue.",
        "Step 2 of 4 is done.",
        "We are now on phase 3 of the rollout.",
        "Our main objective today is a green CI.",
        "Next up: the importer's error report.",
        "I've finished the schema change.",
    ),
    "fact": (
        "The base commit is 9e1f04c.",
        "Our staging server is at 10.2.0.14.",
        "We use Poetry for dependency management.",
        "The CI runner is called hydra-7.",
        "This week's release manager is Dana Ortiz.",
        "Production runs on Kubernetes 1.29.",
        "My name is Ilse.",
        "The metrics dashboard lives at grafana.corp/d/api.",
    ),
    "preference": (
        "I prefer tabs over spaces.",
        "I'd rather have one recommendation than a menu of options.",
        "Please answer in a terse style.",
        "We like short commit messages.",
        "Use British spelling in the docs.",
        "The user wants dates in ISO format.",
        "Prefer pytest fixtures to setup methods.",
        "Keep the tone informal.",
    ),
    None: (
        "Can you check why the build failed?",
        "Never mind, that was my mistake.",
        "The tests are failing again.",
        "Thanks, that looks good.",
        "What is the deadline for the grant?",
        "Don't worry about the flaky test.",
        "I think the problem is the cache.",
        "Let me know when you are done.",
    ),
}

# category -> (a statement the patterns do not read, a paraphrase of it a model might answer with).
BEYOND: dict[str, tuple[tuple[str, str], ...]] = {
    "rule": (("Hands off the vendored folder.", "Do not modify the vendored folder."),
             ("Leave the generated protobuf files alone.", "Don't edit generated protobuf files.")),
    "constraint": (("We can afford $50 of API calls this sprint, no more.", "API spend is capped at $50 this sprint."),
                   ("Friday is the last day this can ship.", "The deadline is Friday.")),
    "goal": (("What we are after is a green CI on the main branch.", "The goal is a green CI on main."),
             ("Half of the endpoints are ported so far.", "50% of the endpoints are ported.")),
    "fact": (("Tests take about ten minutes to run here.", "The test suite takes 10 minutes."),
             ("Everything is deployed from the ops laptop.", "Deploys run from the ops laptop.")),
    "preference": (("Short answers suit me best.", "The user prefers short answers."),
                   ("Bullet points work best for me.", "Use bullet points.")),
}
INVENTED = "Never push to main."  # in every scripted answer; said in no directive
REQUEST = "Please fix the flaky parser test."  # each BEYOND statement is said beside a request for the turn


def model_pass(category: str, said: str, paraphrase: str) -> tuple[list[tuple[str, str]], dict[str, int]]:
    """The model pass over ``REQUEST`` and ``said``, the scripted answer listing ``said`` verbatim, its
    ``paraphrase`` and ``INVENTED``: the items kept (category, text) and the rejections by reason."""
    directive = f"{REQUEST} {said}"
    answer = json.dumps([{"category": category, "text": t} for t in (said, paraphrase)]
                        + [{"category": "rule", "text": INVENTED}])
    reading = read_answer(answer, directive, [])
    return [(d.category, d.text) for d in reading.drafts], reading.rejected


KIT_TYPES = {"safety_rule": "rule", "hard_constraint": "constraint", "fact": "fact", "goal_state": "goal",
             "user_preference": "preference"}


def read_as(text: str) -> str | None:
    """The category the pass reads a statement as (None: nothing stated, or more than one item)."""
    drafts = extract(text)
    return drafts[0].category if len(drafts) == 1 else None


def score(rows: Iterable[tuple[str | None, str]]) -> dict[str | None, Counter[str | None]]:
    """Per expected category: how many statements the pass read as each category."""
    out: dict[str | None, Counter[str | None]] = {}
    for expected, text in rows:
        out.setdefault(expected, Counter())[read_as(text)] += 1
    return out


def own_rows() -> list[tuple[str | None, str]]:
    return [(category, text) for category, texts in PHRASINGS.items() for text in texts]


def kit_rows(seeds: Sequence[int] = (1, 2, 3, 4)) -> list[tuple[str | None, str]]:
    """The kit's canaries (each planted as a user turn of its own), by the category of their type."""
    from compaction_kit import seeded_canaries
    from compaction_kit.corpus import build_random_session
    from compaction_kit.generated import build_generated_session

    canaries = list(seeded_canaries())
    for seed in seeds:
        canaries += build_random_session(seed)[1] + build_generated_session(seed)[1]
    return [(KIT_TYPES[c.type.value], c.content) for c in canaries]


def table(title: str, scored: dict[str | None, Counter[str | None]]) -> list[str]:
    lines = [title, f"  {'category':<11} {'as stated':>9} {'as another':>10} {'missed':>6}"]
    for expected, got in scored.items():
        total = sum(got.values())
        right = got[expected]
        missed = got[None] if expected is not None else 0
        lines.append(f"  {expected or '(nothing)':<11} {right:>4}/{total:<4} {total - right - missed:>10} {missed:>6}")
    return lines


def beyond_table() -> list[str]:
    lines = ["the model pass over a scripted answer, on statements the patterns miss (BEYOND; each answer lists the",
             "statement verbatim, a paraphrase of it and an item never said)",
             f"  {'category':<11} {'patterns':>8} {'kept':>5} {'paraphrases rejected':>20} {'invented rejected':>17}"]
    for category, rows in BEYOND.items():
        patterns = sum(read_as(said) is not None for said, _ in rows)
        kept = paraphrased = invented = 0
        for said, paraphrase in rows:
            items, _ = model_pass(category, said, paraphrase)
            kept += (category, said) in items
            paraphrased += all(text != paraphrase for _, text in items)
            invented += all(text != INVENTED for _, text in items)
        n = len(rows)
        lines.append(f"  {category:<11} {patterns:>6}/{n} {kept:>3}/{n} {paraphrased:>18}/{n} {invented:>15}/{n}")
    return lines


def main() -> None:
    for line in table("extraction, our own phrasings (bench/stated_phrasings.py PHRASINGS)", score(own_rows())):
        print(line)
    for line in beyond_table():
        print(line)
    for line in table("extraction, the kit's canaries (seeded session; randomized and generated corpora, seeds 1-4)",
                      score(kit_rows())):
        print(line)


if __name__ == "__main__":
    main()
