"""The deterministic pass at turn close: stated items recognised in a directive's text (docs/STATE.md). Pure.

No model call: patterns over the user's own sentences, each item the sentence verbatim (a labelled line,
``SAFETY RULE: …``, ``FACT: …``, whole). Recognised: labelled statements; prohibitions (``never X``, ``do not
X``, ``X is not allowed``); rules (``always X``, ``you must X``, ``make sure to X``, ``from now on X``, ``X must
be Y``); budgets, limits (``at most N``, ``no more than N``, ``a maximum of N``) and deadlines; goals and
progress (``my goal is``, ``the next step is``, ``step 3 is done``); facts (``the base commit is X``, ``our
staging host is Y``, ``we use Z``); preferences (``I prefer X``, ``I'd rather``, ``please answer in X style``).
Questions, code blocks and quoted tool results are skipped.

Keys make a later statement supersede an earlier one: ``budget``, ``deadline``, ``goal``, ``next step``,
``base commit``, ``branch``, ``limit:<unit>``, a fact's subject (``staging host``), a preference's pair
(``prefer:spaces|tabs``); else a paraphrase of an item in force about the same subject takes its key
(:func:`~vak_context.context.stated.items.superseded_key`), else the sentence itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vak_context.context.stated.items import StatedItem, norm_key, superseded_key

MAX_ITEMS = 16  # per directive: a pasted document is not a list of rules
MAX_CHARS = 400  # a sentence longer than this is prose, not a statement


@dataclass(frozen=True)
class Draft:
    """An item recognised in a directive, not yet written."""

    category: str
    text: str
    key: str


_I = re.IGNORECASE
_LABEL = re.compile(
    r"^\W{0,3}(safety rules?|hard constraints?|constraints?|rules?|policy|limits?|budget|deadline|facts?|"
    r"goal state|goals?|task state|status|progress|next step|user preferences?|preferences?)\W{0,3}\s*[:\-–—]\s+(?=\S)",
    _I)
_LABELS = {"safety rule": "rule", "rule": "rule", "policy": "rule", "hard constraint": "constraint",
           "constraint": "constraint", "limit": "constraint", "budget": "constraint", "deadline": "constraint",
           "fact": "fact", "goal state": "goal", "goal": "goal", "task state": "goal", "status": "goal",
           "progress": "goal", "next step": "goal", "user preference": "preference", "preference": "preference"}
_LEAD = re.compile(
    r"^(?:(?:please|also|and|so|ok(?:ay)?|oh|btw|by the way|one more thing|finally|important(?:ly)?|"
    r"note|remember|keep in mind|just so you know|fyi|for context|for the record|from now on|going forward|"
    r"for the rest of (?:this|the) (?:session|conversation|task)|in this (?:session|project|repo(?:sitory)?))"
    r"\s*(?:that\b)?\s*[,:;-]?\s*)+", _I)
_NOTED = re.compile(r"^(?:remember|note|keep in mind|just so you know|fyi|for context|for the record)\b", _I)
_STANDING = re.compile(r"^(?:from now on|going forward|for the rest of)\b", _I)

_MONEY = r"(?:[$€£]\s?\d[\d,]*(?:\.\d+)?(?:\s?[kKmM]\b)?|\d[\d,]*(?:\.\d+)?\s?(?:dollars|euros?|usd|eur|gbp|pounds)\b)"
_BUDGET = re.compile(rf"\bbudget\b.{{0,40}}?{_MONEY}|\b(?:spend|spending|costs?)\b.{{0,30}}?\b(?:capped at|cap of|pass|exceed|more than|"
                     rf"over|above|limit(?:ed)? (?:of|to)|at most|up to)\s+{_MONEY}|{_MONEY}.{{0,25}}\bbudget\b|\b(?:spend|spending|cost|costs)\b"
                     rf"\s+(?:at most|no more than|not more than|up to|under|less than|below)\s+{_MONEY}", _I)
_WHEN = (r"(?:mon|tues|wednes|thurs|fri|satur|sun)day|tomorrow|tonight|noon|midnight|eod|end of|the end|"
         r"\d|jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec|next week|this week")
_DEADLINE = re.compile(
    rf"\bdeadline\b|\bdue\s+(?:date|by|on|before)\b|\b(?:must|has to|have to|needs? to|should)\s+(?:all\s+)?be\s+"
    rf"(?:done|finished|ready|shipped|delivered|merged|submitted|complete(?:d)?)\s+(?:by|before)\b|"
    rf"\b(?:finish|ship|deliver|submit|complete|merge)\w*\b.{{0,30}}\b(?:by|before)\s+(?:{_WHEN})", _I)
_CAP = (r"(?:at most|no more than|not more than|never more than|a maximum of|maximum of|max(?:imum)?|"
        r"not (?:to )?exceed|no longer than|capped at|a cap of|limit(?:ed)? (?:of|to|is)|cap (?:is|of|at))")
_SOFTCAP = r"(?:up to|under|fewer than|less than|below|within)"
_LIMIT = re.compile(rf"\b{_CAP}\s+(?P<n>\d[\d,.]*)\s*(?P<unit>%|[a-z]+)?", _I)
_SOFTLIMIT = re.compile(rf"\b{_SOFTCAP}\s+(?P<n>\d[\d,.]*)\s*(?P<unit>%|[a-z]+)?", _I)
_IMPERATIVE = re.compile(r"\b(?:must|should|keep|limit|only|never|don'?t|do not|please|make sure|allowed|ensure)\b", _I)
_PROHIBIT_START = re.compile(
    r"^(?:(?:you|we)\s+)?(?:(?:must|should|shall|may|can)\s*(?:not|n't)\b|cannot\b|(?:must|should|shall|will)\s+never\b|"
    r"never\b|do\s+not\b|don'?t\b|avoid\b|under no circumstances\b|refrain from\b|stop\s+\w+ing\b|no\s+\w+ing\b|"
    r"no\s+(?:external|network|internet|outbound|direct|new|more)\b)", _I)
_PROHIBIT_ANY = re.compile(
    r"\b(?:is|are)\s+(?:strictly\s+)?(?:forbidden|prohibited|not allowed|not permitted|off[- ]limits|banned)\b|"
    r"\b(?:is|are)\s+(?:never|not)\s+to\s+be\b|"
    r"\b(?:you|we)\s+(?:must\s+|should\s+|will\s+)?never\b|\bnever\s+(?:ever\s+)?(?:touch|push|commit|delete|"
    r"reveal|share|send|run|execute|modify|change|use|disclose|deploy|merge|expose|store|log)\b", _I)
_NOT_RULE = re.compile(r"^(?:never\s+mind|don'?t\s+worry|do not worry|no\s+worries|no\s+problem|don'?t\s+know|"
                       r"no\s+idea|never\s+heard)\b", _I)
_RULE_START = re.compile(
    r"^(?:always\b|(?:you\s+)?must\b(?!\s+have\s+been)|(?:you\s+)?(?:have|need)\s+to\s+always\b|make\s+sure\b|"
    r"be\s+sure\s+to\b|remember\s+to\b|ensure\b|don'?t\s+forget\s+to\b|every\s+(?:time|commit|change|answer|reply)\b|"
    r"all\s+\w+(?:\s+\w+)?\s+must\b)", _I)
_RULE_ANY = re.compile(
    r"\b(?:must|shall)\s+(?:always\s+)?(?:be|use|stay|remain|go|pass|run|have|include|keep|follow|get|come)\b|"
    r"\bat all times\b|\b(?:is|are)\s+(?:mandatory|required|compulsory)\b|\balways\s+(?:use|run|ask|check|"
    r"write|answer|reply|keep|include|cite|quote|confirm|report|test|add)\b", _I)
_NOT_MUST = re.compile(r"\b(?:there|it|that|this|which|i|he|she)\s+must\b|\bmust\s+(?:have\s+been|be\s+(?:a|an|the|"
                       r"some)\s+(?:bug|problem|mistake|typo|reason|way))\b", _I)
_ONLY = re.compile(r"^only\s+(?:use|touch|edit|modify|change|run|write|answer|reply|respond|work|commit|deploy|"
                   r"read|call|install|target|support|python|node|java|go|rust)\b|^only\s+[\w.]+\s+\d", _I)
_GOAL = re.compile(
    r"^(?:my|our|the|your)\s+(?:main\s+|overall\s+|end\s+|ultimate\s+|current\s+|real\s+|primary\s+)?"
    r"(?:goal|objective|aim|mission|task|priority|focus)\b(?:\s+(?:here|now|for now|today|for this session))?\s*"
    r"(?:is|are|:|=)|^(?:current task|overall goal|goal)\s*:|^(?:i|we)\s*(?:'re|'m|\s+are|\s+am)\s+"
    r"(?:trying|aiming|working|setting out)\s+to\b|^(?:i|we)\s+(?:want|need|would like|'d like)\s+to\s+"
    r"(?:eventually|ultimately|finally|end up)\b|^the\s+end\s+goal\b|^(?:i|we)\s+(?:want|need)\s+(?:you\s+)?"
    r"to\s+(?:migrate|build|ship|finish|get|implement|port|rewrite|fix)\b.{0,200}\bby the end\b", _I)
_NEXT = re.compile(r"^(?:the\s+)?next(?:\s+step|\s+up|\s+task)?\s*(?:is\b|:|will be\b)|^after\s+(?:this|that),\s+"
                   r"(?:the\s+)?next\b|\bthe next step is\b", _I)
_PHASE = re.compile(r"\bprogress\s*:\s*(?:step|phase|stage)\b|\b(?:we(?:'re|\s+are)|i(?:'m|\s+am))\s+(?:now\s+)?(?:on|at|in)\s+(?:step|phase|stage|milestone)"
                    r"\s+\w+|\b(?:step|phase|stage|milestone)s?\s+[\w-]+(?:\s+(?:of|out of)\s+\d+)?\s+(?:is|are)\s+"
                    r"(?:now\s+)?(?:done|complete(?:d)?|finished|merged)\b|\bis at (?:step|phase|stage)\b", _I)
_DONE = re.compile(r"^(?:i|we)\s*(?:'ve|\s+have)?\s+(?:now\s+)?(?:finished|completed|done with|wrapped up|shipped|"
                   r"merged)\b|\b(?:is|are)\s+(?:now\s+)?(?:done|finished|complete(?:d)?)\s*[.!]?$", _I)
# "Let me know when you are done": a step to be done, not one done.
_NOT_DONE = re.compile(r"\b(?:when|once|if|after|until|before|whether)\b.{0,40}\b(?:is|are)\s+(?:now\s+)?"
                       r"(?:done|finished|complete)", _I)
_BASE = re.compile(r"\b(?:base|parent|starting|head)\s+commit\b|\bbased\s+on\s+commit\b|\bbranched\s+(?:off|from)\b", _I)
_BRANCH = re.compile(r"\b(?:working|current|our|the|my|feature)\s+branch\s+(?:is|:)|\bwe(?:'re|\s+are)\s+(?:working\s+)?"
                     r"on\s+branch\b|^current branch\s*:", _I)
_TZ = re.compile(r"\btime\s?zone\b|\b(?:[A-Z][a-z]+|Etc|UTC)/[A-Z][A-Za-z_+-]+")  # "Europe/Paris", "Zone/Auram"
_IS = re.compile(r"^(?:this week's|today's|the|my|our|your|this)\s+(?P<subj>(?:[\w'/.-]+\s+){0,4}?[\w'/.-]+)\s+"
                 r"(?:is|are|lives|runs|sits)\s+(?:now\s+|currently\s+|still\s+|always\s+)?(?:at|in|on|called|named)?\s*"
                 r"(?P<val>.+)$", _I)
_NOT_SUBJECT = frozenset({"problem", "issue", "question", "thing", "reason", "point", "idea", "answer", "result",
                          "error", "bug", "output", "difference", "trouble", "catch", "way", "plan", "fix", "code"})
_NOT_VALUE = re.compile(r"^(?:that|because|why|how|what|when|where|if|not|so|very|too|quite|really|probably|likely|"
                        r"maybe|perhaps|broken|wrong|failing|empty|missing|weird|strange|confusing|slow|being|getting|"
                        r"still|in (?:draft|progress|review|flux|the works)|under (?:way|review|discussion)|unclear|"
                        r"undecided|tbd)\b"
                        # a second clause ("in draft and section four is open"): a status report, not a value
                        r"|.*\b(?:and|but|while)\b.*\b(?:is|are|was|were)\b", _I)
_USES = re.compile(r"^(?:we|i|the project|this project|the repo|the app|the service|production|prod|staging)\s+"
                   r"(?:use|uses|'re using|are using|run|runs|deploy(?:s)? (?:to|on)|target(?:s)?|(?:is|are) on)\s+\S", _I)
_CALL_ME = re.compile(r"^(?:call me|my name is|i am called|i'm called)\b", _I)
_PREFER = re.compile(
    r"^(?:i|we|the user|user)(?:\s+|(?='))(?:would\s+|'d\s+|really\s+|strongly\s+|always\s+)?(?:prefers?|rather|like(?:s)?\s+it\s+when|"
    r"favou?rs?|likes?\s+(?:my|our|short|long|terse|brief|concise|detailed)|wants?\s+(?:all\s+|every\s+|the\s+|my\s+|our\s+)?"
    r"(?:answers?|responses?|replies|code|output|examples?|measurements?|times?|dates?|numbers?|units?|reports?|"
    r"summar(?:y|ies)|commit messages?)\b)|^(?:my|our|the user's)\s+(?:preferred|preference)\b|^prefer\b|"
    r"^(?:use|write|answer|reply|respond|keep|format)\b.{0,80}\b(?:style|tone|format(?:ting)?|units|concise|terse|"
    r"brief|formal|informal|bullet points?|british|american|spelling)\b", _I)
_PAIR = re.compile(r"\bprefers?\s+(?P<a>.+?)\s+(?:over|to|rather than|instead of)\s+(?P<b>[^.,;]+)", _I)
_QUOTED = re.compile(r"^\[(?:the result of|an earlier reply of yours)\b", _I)


def extract(text: str, current: tuple[StatedItem, ...] = ()) -> list[Draft]:
    """The items ``text`` (a directive) states, in order, keyed against ``current`` (the items in force):
    an item equal to one in force (same category, key and text) is left out."""
    out: list[Draft] = []
    keys: dict[str, int] = {}
    for sentence, labelled in _statements(text):
        draft = classify(sentence, labelled, current)
        if draft is None:
            continue
        if any(it.key == draft.key and it.text == draft.text and it.category == draft.category for it in current):
            continue
        if draft.key in keys:  # restated later in the same directive: the later one stands
            out[keys[draft.key]] = draft
            continue
        keys[draft.key] = len(out)
        out.append(draft)
        if len(out) >= MAX_ITEMS:
            break
    return out


def classify(sentence: str, labelled: str | None = None, current: tuple[StatedItem, ...] = ()) -> Draft | None:
    """One sentence (or labelled line) as a stated item, or None. ``labelled``: the category its label names."""
    body = _LEAD.sub("", _LABEL.sub("", sentence) if labelled else sentence).strip()
    noted = bool(_NOTED.match(sentence))
    standing = bool(_STANDING.match(sentence))
    if labelled is None and (not body or sentence.rstrip().endswith("?") or _NOT_RULE.match(body)):
        return None
    category, key = labelled, _specific_key(body)
    if category is None:
        category = _category(body, standing, noted, key)
        if category is None:
            return None
    # A paraphrase of an item in force takes its key; else the subject's by name, the fact's, the sentence's.
    key = superseded_key(body, category, current) or key
    if key is None and category == "fact":
        key = _fact_key(body)
    if key is None and category == "preference" and (m := _PAIR.search(body)):
        key = "prefer:" + "|".join(sorted((norm_key(m["a"]), norm_key(m["b"]))))
    if key is None:
        key = norm_key(body)
    return Draft(category, sentence.strip(), key)


def _category(body: str, standing: bool, noted: bool, key: str | None) -> str | None:
    if key in ("budget", "deadline") or (key or "").startswith("limit:"):
        return "constraint"
    if _PROHIBIT_START.match(body) or _PROHIBIT_ANY.search(body):
        return "rule"
    if _ONLY.match(body):
        return "constraint"
    if _RULE_START.match(body) or (_RULE_ANY.search(body) and not _NOT_MUST.search(body)):
        return "rule"
    if key in ("goal", "next step", "phase", "progress"):
        return "goal"
    if _PREFER.match(body):
        return "preference"
    if key is not None or _fact_key(body) is not None or _USES.match(body) or _CALL_ME.match(body):
        return "fact"
    if standing:
        return "rule"
    if noted:
        return "fact"
    return None


def _specific_key(body: str) -> str | None:
    """The key of the subjects a later statement must supersede by name, whatever its phrasing."""
    if _BUDGET.search(body):
        return "budget"
    if _DEADLINE.search(body):
        return "deadline"
    m = _LIMIT.search(body)
    if m is None and _IMPERATIVE.search(body):
        m = _SOFTLIMIT.search(body)
    if m is not None and not _MONEY_ONLY.match(m.group(0)):
        return f"limit:{_singular((m['unit'] or '').lower()) or 'count'}"
    if _BASE.search(body):
        return "base commit"
    if _BRANCH.search(body):
        return "branch"
    if _TZ.search(body):
        return "timezone"
    if _NEXT.search(body):
        return "next step"
    if _PHASE.search(body):
        return "phase"
    if _GOAL.match(body):
        return "goal"
    if _DONE.search(body) and not _NOT_DONE.search(body):
        return "progress"
    if _CALL_ME.match(body):
        return "name"
    return None


_MONEY_ONLY = re.compile(r"^\D*$")


def _singular(word: str) -> str:
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    return word[:-1] if word.endswith("s") and not word.endswith("ss") else word


def _fact_key(body: str) -> str | None:
    """``the <subject> is <value>``: the subject, when the value reads as one (short, not an opinion)."""
    m = _IS.match(body.rstrip(".! "))
    if m is None:
        return None
    subj, val = m["subj"].strip(), m["val"].strip()
    words = subj.lower().split()
    if words[-1] in _NOT_SUBJECT or len(val.split()) > 12 or _NOT_VALUE.match(val):
        return None
    return norm_key(subj)


def readable_lines(text: str) -> list[str]:
    """The directive's lines the pass reads, stripped: code blocks, indented or quoted lines and quoted tool
    results left out (the model pass takes its spans from these too, ``context/stated/model_pass.py``)."""
    out: list[str] = []
    fenced = False
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced or not line or _QUOTED.match(line) or raw.startswith(("    ", "\t", ">")):
            continue
        out.append(line)
    return out


def _statements(text: str) -> list[tuple[str, str | None]]:
    """The directive's lines and sentences, each with the category its label names (a labelled line is
    one statement, whole); code blocks and quoted tool results are left out."""
    out: list[tuple[str, str | None]] = []
    for line in readable_lines(text):
        label = _label_of(line)
        if label is not None:
            if len(line) <= MAX_CHARS:
                out.append((line, label))
            continue
        for sentence in _SENTENCE.split(line):
            sentence = sentence.strip()
            if 3 <= len(sentence) <= MAX_CHARS:
                out.append((sentence, _label_of(sentence)))
    return out


def _label_of(text: str) -> str | None:
    """The category a statement's label names (``SAFETY RULE:``, ``Fact -``), or None."""
    m = _LABEL.match(text)
    if m is None:
        return None
    label = m.group(1).lower()
    return _LABELS.get(label if label in _LABELS else label.removesuffix("s"))


# A sentence ends at . ! ? followed by a space and a capital or a digit: never inside a number, a version, a path
# or a URL. A clause after ";" stays with its rule ("do not touch X; the DBA owns it").
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")
